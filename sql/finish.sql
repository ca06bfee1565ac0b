-- Finishing a claim: complete, complete_many, fail, extend, release, fenced by attempt.
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('mail', max_attempts => 3, backoff_base => '10 seconds', backoff_max => '25 seconds');

-- complete: true once, then false; the job leaves the hot table.
SELECT pgq.enqueue('mail', '{"n": 1}') AS j1 \gset
SELECT id, attempt FROM pgq.claim('mail');
SELECT pgq.complete(:j1, 2) AS wrong_attempt;
SELECT pgq.complete(:j1, 1) AS completed;
SELECT pgq.complete(:j1, 1) AS completed_twice;
SELECT count(*) AS in_hot_table FROM pgq.jobs WHERE id = :j1;
-- Counted once (preloaded: in shared memory until a maintenance pass writes
-- it to pgq.finished; queue_stats adds both).
SELECT done_recent FROM pgq.queue_stats WHERE queue = 'mail';
SELECT finished_dropped FROM pgq.maintain();
SELECT queue_id, jobs FROM pgq.finished;
SELECT done_recent FROM pgq.queue_stats WHERE queue = 'mail';
-- A pending job was never claimed by anyone: nothing to complete.
SELECT pgq.enqueue('mail', '{"n": 2}') AS j2 \gset
SELECT pgq.complete(:j2, 0) AS pending_job;

-- complete_many: how many were completed, one statement.
SELECT array_agg(id ORDER BY id) AS ids, array_agg(attempt ORDER BY id) AS atts
  FROM pgq.claim('mail', 10) \gset
SELECT pgq.enqueue('mail', '{"n": 3}') AS j3 \gset
SELECT id, attempt FROM pgq.claim('mail');
SELECT pgq.complete_many(:'ids'::bigint[] || :j3::bigint || 999999::bigint, :'atts'::int[] || 1 || 1) AS completed;
SELECT pgq.complete_many('{}', '{}') AS none;

-- fail: back to pending after an equal-jitter backoff in [base/2, base] * 2^(attempt-1).
SELECT pgq.enqueue('mail', '{"n": 4}') AS j4 \gset
SELECT attempt FROM pgq.claim('mail');
SELECT pgq.fail(:j4, 1, 'smtp timeout');
SELECT state, attempt, last_error, lease_until IS NULL AS no_lease,
       run_at - pgq.clock() BETWEEN interval '4 seconds' AND interval '10 seconds' AS backoff_1
  FROM pgq.jobs WHERE id = :j4;
SELECT pgq.fail(:j4, 1, 'again') AS fail_when_not_running;
SET pgq.debug_clock_offset = '1min';
SELECT attempt FROM pgq.claim('mail');
SELECT pgq.fail(:j4, 2, 'smtp timeout');
SELECT run_at - pgq.clock() BETWEEN interval '9 seconds' AND interval '20 seconds' AS backoff_2
  FROM pgq.jobs WHERE id = :j4;
SET pgq.debug_clock_offset = '2min';
SELECT attempt FROM pgq.claim('mail');
-- The third failure exhausts max_attempts: dead-letter, job kept whole.
SELECT pgq.fail(:j4, 3, 'mailbox does not exist');
SELECT count(*) AS in_hot_table FROM pgq.jobs WHERE id = :j4;
SELECT id, queue, payload, attempts, last_error, reason FROM pgq.dead_jobs;
RESET pgq.debug_clock_offset;

-- fail with retry_in: exactly that delay, no jitter.
SELECT pgq.enqueue('mail', '{"n": 5}') AS j5 \gset
SELECT attempt FROM pgq.claim('mail');
SELECT pgq.fail(:j5, 1, NULL, retry_in => '1 hour');
SELECT run_at - pgq.clock() BETWEEN interval '59 minutes 59 seconds' AND interval '1 hour' AS in_an_hour,
       last_error IS NULL AS no_error_text
  FROM pgq.jobs WHERE id = :j5;
SELECT pgq.fail(:j5, 1) AS fail_pending;

-- extend: a heartbeat; NULL once the claim no longer holds.
SELECT pgq.enqueue('mail', '{"n": 6}') AS j6 \gset
SELECT attempt FROM pgq.claim('mail', 1, lease => '10 seconds');
SELECT pgq.extend(:j6, 1, '10 minutes') - pgq.clock() BETWEEN interval '9 minutes 59 seconds' AND interval '10 minutes' AS extended;
SELECT pgq.extend(:j6, 2, '10 minutes') AS wrong_attempt;

-- release: give back without counting the attempt.
SELECT pgq.release(:j6, 1) AS released;
SELECT pgq.release(:j6, 1) AS released_twice;
SELECT state, attempt, lease_until IS NULL AS no_lease FROM pgq.jobs WHERE id = :j6;
SELECT id = :j6 AS same_job, attempt AS same_attempt_number FROM pgq.claim('mail');
SELECT pgq.extend(:j6, 1, '1 minute') IS NOT NULL AS extend_after_release_and_reclaim;
SELECT pgq.complete(:j6, 1) AS completed_after_release;

-- A lease that expired and was claimed again fences the old claimer out.
SELECT pgq.enqueue('mail', '{"n": 7}') AS j7 \gset
SELECT attempt FROM pgq.claim('mail', 1, lease => '1 minute');
SET pgq.debug_clock_offset = '2min';
SELECT expired_requeued FROM pgq.maintain();
-- Expired but not yet re-claimed: the late complete is accepted (no duplicate run).
SELECT pgq.complete(:j7, 1) AS late_complete_accepted;
-- A late fail is accepted the same way: its error is kept, backoff applies.
SELECT pgq.enqueue('mail', '{"n": 9}') AS j9 \gset
SELECT attempt FROM pgq.claim('mail', 1, lease => '1 minute');
SET pgq.debug_clock_offset = '3min';
SELECT expired_requeued FROM pgq.maintain();
SELECT last_error FROM pgq.jobs WHERE id = :j9;
SELECT pgq.fail(:j9, 1, 'HTTP 503 after the lease ran out') AS late_fail;
SELECT state, attempt, last_error, run_at > pgq.clock() AS backing_off FROM pgq.jobs WHERE id = :j9;
SELECT pgq.fail(:j9, 1, 'twice') AS late_fail_twice;
SELECT pgq.cancel(:j9);
SELECT pgq.enqueue('mail', '{"n": 8}') AS j8 \gset
SELECT attempt FROM pgq.claim('mail', 1, lease => '1 minute');
SET pgq.debug_clock_offset = '4min';
SELECT expired_requeued FROM pgq.maintain();
SELECT id = :j8 AS reclaimed, attempt FROM pgq.claim('mail');
SELECT pgq.complete(:j8, 1) AS stale_complete;
SELECT pgq.fail(:j8, 1, 'stale') AS stale_fail;
SELECT pgq.extend(:j8, 1, '1 minute') AS stale_extend;
SELECT pgq.release(:j8, 1) AS stale_release;
SELECT pgq.complete(:j8, 2) AS current_complete;
RESET pgq.debug_clock_offset;

-- complete_many of one job runs complete's statement (issue 31): the same
-- fencing, and the same side effects: its group moves on, its key is free.
SELECT pgq.create_queue('one');
SELECT pgq.enqueue('one', '{"n": 1}', group_key => 'g', dedupe_key => 'k') AS o1 \gset
SELECT pgq.enqueue('one', '{"n": 2}', group_key => 'g') AS o2 \gset
SELECT state FROM pgq.jobs WHERE id = :o2;
SELECT id = :o1 AS head_claimed, attempt FROM pgq.claim('one');
SELECT pgq.complete_many(ARRAY[:o1]::bigint[], '{2}') AS wrong_attempt;
SELECT pgq.complete_many(ARRAY[:o1]::bigint[], '{1}') AS completed_one;
SELECT pgq.complete_many(ARRAY[:o1]::bigint[], '{1}') AS completed_one_twice;
SELECT state FROM pgq.jobs WHERE id = :o2;
SELECT pgq.enqueue('one', '{"n": 3}', dedupe_key => 'k') <> :o1 AS key_free;

-- complete_many looks each job up by id whatever the statistics its plan was
-- made with (issue 31). Plans are made once per backend: one made while
-- pgq.job_rows was empty and vacuumed (a queue idle before a burst), or small
-- with statistics of an empty table, used to read every held job (a hash
-- join over job_rows_pkey, or a BitmapOr of the partial indexes) on every call,
-- so each complete_many of a deep backlog fetched the whole backlog. Counted
-- in the transaction's own statistics: the heap tuples fetched through an
-- index by one complete_many of 2 jobs out of 5,000 or 5,500.
ALTER TABLE pgq.job_rows SET (autovacuum_enabled = off);
DELETE FROM pgq.job_rows;
VACUUM ANALYZE pgq.job_rows;
\c
SELECT pgq.complete_many('{-1, -2}', '{1, 1}') AS planned_while_empty;
SELECT count(*) FROM pgq.enqueue_many('mail', array_fill('{}'::jsonb, ARRAY[5000]));
SELECT array_agg(id ORDER BY id) AS ids, array_agg(attempt ORDER BY id) AS atts
  FROM pgq.claim('mail', 2) \gset
BEGIN;
SELECT idx_tup_fetch AS fetched_before FROM pg_stat_xact_user_tables
 WHERE relid = 'pgq.job_rows'::regclass \gset
SELECT pgq.complete_many(:'ids', :'atts') AS completed_of_5000;
SELECT idx_tup_fetch - :fetched_before < 100 AS looked_up_by_id
  FROM pg_stat_xact_user_tables WHERE relid = 'pgq.job_rows'::regclass;
COMMIT;
-- The same with a plan made while 500 jobs were in a table analyzed empty,
-- 50 of them running.
DELETE FROM pgq.job_rows;
VACUUM ANALYZE pgq.job_rows;
SELECT count(*) FROM pgq.enqueue_many('mail', array_fill('{}'::jsonb, ARRAY[500]));
SELECT count(*) FROM pgq.claim('mail', 50);
\c
SELECT pgq.complete_many('{-1, -2}', '{1, 1}') AS planned_while_small;
SELECT count(*) FROM pgq.enqueue_many('mail', array_fill('{}'::jsonb, ARRAY[5000]));
SELECT array_agg(id ORDER BY id) AS ids, array_agg(attempt ORDER BY id) AS atts
  FROM pgq.claim('mail', 2) \gset
BEGIN;
SELECT idx_tup_fetch AS fetched_before FROM pg_stat_xact_user_tables
 WHERE relid = 'pgq.job_rows'::regclass \gset
SELECT pgq.complete_many(:'ids', :'atts') AS completed_of_5500;
SELECT idx_tup_fetch - :fetched_before < 100 AS looked_up_by_id
  FROM pg_stat_xact_user_tables WHERE relid = 'pgq.job_rows'::regclass;
COMMIT;
ALTER TABLE pgq.job_rows RESET (autovacuum_enabled);

DROP EXTENSION pgq_cpp;
