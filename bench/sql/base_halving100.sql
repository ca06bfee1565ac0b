-- The commit-halving pattern, plain SQL: one transaction deletes the previous
-- batch and claims the next 100 (see pgq_halving.sql). LIMIT is a literal, as in
-- base_claim100.sql.
BEGIN;
DELETE FROM bench_jobs WHERE id = ANY(:ids);
WITH claimed AS (
    UPDATE bench_jobs
       SET status = 'running', attempts = attempts + 1, lease_until = now() + interval '2 min'
     WHERE id IN (SELECT id FROM bench_jobs
                   WHERE queue = 'bench' AND status = 'pending' AND run_at <= now()
                   ORDER BY priority DESC, run_at, id
                   LIMIT 100
                   FOR UPDATE SKIP LOCKED)
    RETURNING id
)
SELECT COALESCE(array_agg(id), '{}') AS ids FROM claimed \gset
COMMIT;
