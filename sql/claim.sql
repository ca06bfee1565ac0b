-- Claim: order, batch size, leases, readiness, paused queues, wait.
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('work', lease => '5 minutes');

-- Claim order: highest priority first, then oldest run_at, then lowest id.
SELECT pgq.enqueue('work', '{"name": "low-old"}', run_at => '2026-01-01 00:00+00', priority => 0);
SELECT pgq.enqueue('work', '{"name": "high-new"}', run_at => '2026-01-03 00:00+00', priority => 9);
SELECT pgq.enqueue('work', '{"name": "low-new"}', run_at => '2026-01-02 00:00+00', priority => 0);
SELECT pgq.enqueue('work', '{"name": "high-old"}', run_at => '2026-01-02 00:00+00', priority => 9);
SELECT pgq.enqueue('work', '{"name": "low-old-2"}', run_at => '2026-01-01 00:00+00', priority => 0);
SELECT id, queue, payload->>'name' AS name, attempt, max_attempts, priority,
       lease_until - pgq.clock() BETWEEN interval '4 minutes 59 seconds' AND interval '5 minutes' AS queue_lease
  FROM pgq.claim('work', 3);
-- Leased in the same statement.
SELECT id, state, attempt FROM pgq.jobs ORDER BY id;
-- An explicit lease overrides the queue's.
SELECT id, payload->>'name' AS name,
       lease_until - pgq.clock() BETWEEN interval '9 seconds' AND interval '10 seconds' AS own_lease
  FROM pgq.claim('work', 10, lease => '10 seconds');
SELECT count(*) AS nothing_left FROM pgq.claim('work', 10);

-- A job scheduled for later is not ready until its run_at.
SELECT pgq.enqueue('work', '{"name": "tomorrow"}', run_at => pgq.clock() + interval '1 day') AS tomorrow \gset
SELECT count(*) AS claimed_today FROM pgq.claim('work');
SELECT queue, ready, scheduled, running FROM pgq.queue_stats;
SET pgq.debug_clock_offset = '1d';
SELECT id = :tomorrow AS claimed_tomorrow, attempt FROM pgq.claim('work');
RESET pgq.debug_clock_offset;

-- The batch may be 1 to 10000.
SELECT count(*) FROM pgq.claim('work', 10000);

-- wait: with nothing ready, the claim waits and returns an empty set.
SELECT count(*) AS after_wait FROM pgq.claim('work', 1, wait => '50 milliseconds');
-- A transaction snapshot would never see new jobs while waiting.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT count(*) FROM pgq.claim('work', 1, wait => '1 second');
ROLLBACK;
-- Without wait, claim works at any isolation level.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT count(*) AS claimed_in_rr FROM pgq.claim('work', 1);
ROLLBACK;
-- pgq.wait_recheck: the longest sleep of a waiting claim or next_batch
-- before it looks again, when nothing wakes it sooner (1 s; 10 ms to 1 h).
-- Any role may set it for its own session's waits; the wait's end still
-- comes first.
SHOW pgq.wait_recheck;
SET pgq.wait_recheck = '5ms';
SET pgq.wait_recheck = '2h';
CREATE ROLE pgq_t_recheck;
SET ROLE pgq_t_recheck;
SET pgq.wait_recheck = '1min';
SHOW pgq.wait_recheck;
RESET ROLE;
DROP ROLE pgq_t_recheck;
SELECT count(*) AS after_short_wait FROM pgq.claim('work', 1, wait => '50 milliseconds');
RESET pgq.wait_recheck;

-- Claims roll back with their transaction.
SELECT pgq.enqueue('work', '{"name": "rolled-back-claim"}') AS rb \gset
BEGIN;
SELECT id = :rb AS claimed, attempt FROM pgq.claim('work');
ROLLBACK;
SELECT state, attempt FROM pgq.jobs WHERE id = :rb;
SELECT id = :rb AS claimed_again, attempt FROM pgq.claim('work');

DROP EXTENSION pgq_cpp;
