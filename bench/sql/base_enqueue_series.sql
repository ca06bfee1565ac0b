-- 100 jobs in one plain multi-row INSERT ... SELECT FROM generate_series:
-- the cheapest batch insert into the hand-written queue (issue 16's
-- comparison for pgq.enqueue_many; bench/run.sh workload enqueue_series).
WITH ins AS (
    INSERT INTO bench_jobs (queue, payload)
    SELECT 'bench', '{"k":1}'::jsonb FROM generate_series(1, 100)
    RETURNING id
)
SELECT count(*) FROM ins;
