-- claim 100, then complete them. LIMIT is a literal: as a bind parameter (LIMIT $1 under
-- pgbench -M prepared) the plan cache keeps re-planning this query, which cost
-- the baseline ~40% at n=10 in a trial; the baseline gets its best shot.
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
SELECT array_agg(id) AS ids FROM claimed \gset
DELETE FROM bench_jobs WHERE id = ANY(:ids);
