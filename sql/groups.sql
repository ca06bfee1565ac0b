-- FIFO groups (enqueue's group_key): the jobs of a group run one at a time,
-- in enqueue order; other groups and ungrouped jobs run in parallel.
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('chat', max_attempts => 2, backoff_base => '0', backoff_max => '0');

SELECT pgq.enqueue('chat', '{"m": "ann-1"}', group_key => 'ann') AS ann1 \gset
SELECT pgq.enqueue('chat', '{"m": "ann-2"}', group_key => 'ann') AS ann2 \gset
SELECT pgq.enqueue('chat', '{"m": "bob-1"}', group_key => 'bob') AS bob1 \gset
SELECT pgq.enqueue('chat', '{"m": "loose"}') AS loose \gset
-- Only each group's head is pending; the rest wait ('w').
SELECT payload->>'m' AS m, state FROM pgq.jobs ORDER BY id;
-- One claim takes both heads and the ungrouped job, never ann-2.
SELECT payload->>'m' AS m FROM pgq.claim('chat', 10) ORDER BY id;
SELECT count(*) AS nothing_more FROM pgq.claim('chat', 10);

-- Completing the head makes the next of its group pending.
SELECT pgq.complete(:ann1, 1);
SELECT payload->>'m' AS m, state FROM pgq.jobs WHERE group_key = 'ann';
SELECT payload->>'m' AS m FROM pgq.claim('chat', 10);

-- A head that fails and retries stays the head: its group waits for it.
SELECT pgq.enqueue('chat', '{"m": "bob-2"}', group_key => 'bob') AS bob2 \gset
SELECT pgq.fail(:bob1, 1, 'network');
SELECT payload->>'m' AS m, state, attempt FROM pgq.jobs WHERE group_key = 'bob' ORDER BY id;
SELECT payload->>'m' AS m, attempt FROM pgq.claim('chat', 10);
-- Dead-lettered (attempts exhausted), it lets the group move on.
SELECT pgq.fail(:bob1, 2, 'network again');
SELECT payload->>'m' AS m, state FROM pgq.jobs WHERE group_key = 'bob';

-- A cancelled head moves its group on too.
SELECT pgq.enqueue('chat', '{"m": "cy-1"}', group_key => 'cy') AS cy1 \gset
SELECT pgq.enqueue('chat', '{"m": "cy-2"}', group_key => 'cy') AS cy2 \gset
SELECT pgq.cancel(:cy1);
SELECT payload->>'m' AS m, state FROM pgq.jobs WHERE group_key = 'cy';

-- A group key of another queue is another group.
SELECT pgq.create_queue('mail');
SELECT pgq.enqueue('mail', '{"m": "ann-mail"}', group_key => 'ann') AS ann_mail \gset
SELECT state FROM pgq.jobs WHERE id = :ann_mail;

-- A group with a deep backlog (one tenant's import under one key): when its
-- head leaves, the room the group has is read through jobs_group_live_idx
-- (its pending and running jobs), not by passing every waiting job (each
-- completion read the whole backlog through jobs_group_idx).
SELECT pgq.create_queue('import');
SELECT count(*) AS enqueued
  FROM (SELECT pgq.enqueue('import', '{}', group_key => 'tenant') FROM generate_series(1, 500)) e;
SELECT id AS head, attempt AS head_attempt FROM pgq.claim('import', 1) \gset
SELECT pg_stat_force_next_flush();
SELECT idx_scan AS live_scans FROM pg_stat_user_indexes
 WHERE schemaname = 'pgq' AND indexrelname = 'jobs_group_live_idx' \gset
SELECT pgq.complete(:head, :head_attempt);
SELECT pg_stat_force_next_flush();
SELECT idx_scan > :live_scans AS room_read_through_the_live_index FROM pg_stat_user_indexes
 WHERE schemaname = 'pgq' AND indexrelname = 'jobs_group_live_idx';
SELECT j.state, count(*) FROM pgq.jobs j JOIN pgq.queues q USING (queue_id)
 WHERE q.name = 'import' GROUP BY j.state ORDER BY j.state;

SELECT reason, payload->>'m' AS m FROM pgq.dead_jobs ORDER BY id;

DROP EXTENSION pgq_cpp;
