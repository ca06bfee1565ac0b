WITH ins AS (
    INSERT INTO bench_jobs (queue, payload)
    SELECT 'bench', p FROM unnest(array_fill('{"k":1}'::jsonb, ARRAY[100])) AS p
    RETURNING id
)
SELECT count(*) FROM ins;
