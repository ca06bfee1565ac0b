-- enqueue_many with keys against the same jobs enqueued one by one in one
-- statement (issue 34): psql -X -f bench/enqueue_many_keys.sql on a
-- database with pgq_cpp 3.1 and nothing else in it; \timing prints each
-- statement's time. bench/RESULTS.md has the figures.
\timing on
SELECT pgq.create_queue('kb', group_concurrency => 1000);
-- warm
SELECT count(*) FROM pgq.enqueue_many('kb', array_fill('{"w":1}'::jsonb, ARRAY[500]));
BEGIN;
SELECT count(*) AS batch_no_keys FROM pgq.enqueue_many('kb', array_fill('{"a":1}'::jsonb, ARRAY[2000]));
COMMIT;
BEGIN;
SELECT count(*) AS batch_one_group FROM pgq.enqueue_many('kb', array_fill('{"b":1}'::jsonb, ARRAY[2000]), group_keys => ARRAY['tenant-1']);
COMMIT;
BEGIN;
SELECT count(*) AS batch_dedupe_each FROM pgq.enqueue_many('kb', array_fill('{"c":1}'::jsonb, ARRAY[2000]), dedupe_keys => (SELECT array_agg('d-' || i) FROM generate_series(1, 2000) i));
COMMIT;
BEGIN;
SELECT count(*) AS loop_one_group FROM (SELECT pgq.enqueue('kb', '{"e":1}', group_key => 'tenant-2') FROM generate_series(1, 2000)) s;
COMMIT;
BEGIN;
SELECT count(*) AS loop_dedupe_each FROM (SELECT pgq.enqueue('kb', '{"f":1}', dedupe_key => 'f-' || i) FROM generate_series(1, 2000) i) s;
COMMIT;
