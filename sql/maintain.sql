-- maintain(): expired leases, exhausted jobs, retention; queue_stats.
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('sync', max_attempts => 2, lease => '1 minute', retention => '1 hour');

SELECT pgq.enqueue_many('sync', ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}', '{"n": 4}']::jsonb[]);
SELECT pgq.enqueue('sync', '{"n": 5}', run_at => pgq.clock() + interval '30 minutes');
SELECT id, attempt FROM pgq.claim('sync', 3);
SELECT pgq.complete(1, 1);
SELECT queue, ready, scheduled, running, expired, dead, done_recent, paused FROM pgq.queue_stats;

-- Nothing is due yet.
SELECT * FROM pgq.maintain();

-- Two minutes later the two running leases have expired: back to pending,
-- counted as a failed attempt, never released early.
SET pgq.debug_clock_offset = '2min';
SELECT queue, ready, running, expired FROM pgq.queue_stats;
SELECT * FROM pgq.maintain();
SELECT id, state, attempt, last_error FROM pgq.jobs ORDER BY id;
SELECT * FROM pgq.maintain();
-- Expired jobs keep their place in line: they come before jobs enqueued after them.
SELECT id, attempt FROM pgq.claim('sync', 1);
SELECT pgq.release(2, 2);

-- Claimed again and expired again: attempts are exhausted, so dead-letter
-- with reason 'expired'.
SELECT id, attempt FROM pgq.claim('sync', 3);
SET pgq.debug_clock_offset = '4min';
SELECT * FROM pgq.maintain();
SELECT id, attempts, reason, last_error FROM pgq.dead_jobs ORDER BY id;
SELECT id, state, attempt FROM pgq.jobs ORDER BY id;

-- Finished jobs are kept for the queue's retention, then dropped.
SELECT queue, done_recent, dead FROM pgq.queue_stats;
SET pgq.debug_clock_offset = '2h';
SELECT queue, done_recent FROM pgq.queue_stats;
SELECT * FROM pgq.maintain();
SELECT count(*) AS finished_rows_kept FROM pgq.finished;
RESET pgq.debug_clock_offset;

-- A pass over a large backlog works in bounded batches and gets all of it.
-- The statements were planned above, while pgq.job_rows held a handful of rows;
-- their plans must still go through indexes now that it holds thousands
-- (a sequential scan with an id = ANY(...) filter is quadratic in the batch).
-- (No compaction here: with its counters reset the table looks all dead,
-- and the rewrite's own scan would be counted.)
SET pgq.compact_min_size = -1;
SELECT pg_stat_force_next_flush();  -- count only what follows
SELECT pg_stat_reset_single_table_counters('pgq.job_rows'::regclass);
SELECT pgq.create_queue('bulk', lease => '1 minute');
-- Priority 1: the jobs are rows of pgq.job_rows, not entries of the
-- queue's ring (whose claims hand out at most 4,096 at once:
-- sql/ring_queues.sql).
SELECT count(*) FROM pgq.enqueue_many('bulk', array_fill('{}'::jsonb, ARRAY[12000]), priority => 1);
SELECT count(*) FROM pgq.claim('bulk', 10000);
SELECT count(*) FROM pgq.claim('bulk', 10000);
SET pgq.debug_clock_offset = '2min';
SELECT * FROM pgq.maintain();
SELECT pg_stat_force_next_flush();
SELECT seq_scan AS sequential_scans_of_jobs FROM pg_stat_user_tables
 WHERE relid = 'pgq.job_rows'::regclass;
SELECT queue, ready, running FROM pgq.queue_stats WHERE queue = 'bulk';
RESET pgq.debug_clock_offset;
RESET pgq.compact_min_size;

DROP EXTENSION pgq_cpp;
