-- The plain-SQL baseline's read1000 (bench/streams.sh): base_claim100.sql
-- with LIMIT 1000 (a literal, as there), then the delete of what it claimed.
WITH claimed AS (
    UPDATE bench_jobs
       SET status = 'running', attempts = attempts + 1, lease_until = now() + interval '2 min'
     WHERE id IN (SELECT id FROM bench_jobs
                   WHERE queue = 'bench' AND status = 'pending' AND run_at <= now()
                   ORDER BY priority DESC, run_at, id
                   LIMIT 1000
                   FOR UPDATE SKIP LOCKED)
    RETURNING id
)
SELECT array_agg(id) AS ids FROM claimed \gset
DELETE FROM bench_jobs WHERE id = ANY(:ids);
