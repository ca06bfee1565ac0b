-- Dependencies (issue 18, enqueue's after): a job waits until every job it
-- names is done, then is ready in the same transaction; if one of them dies
-- (dead or cancelled) it is dead-lettered with reason dependency_failed, and
-- so are its own dependents.
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('render');
SELECT pgq.create_queue('send');

-- Fan-in: one child waiting for two parents, a grandchild for the child.
SELECT pgq.enqueue('render', '{"pdf": 1}') AS r1 \gset
SELECT pgq.enqueue('render', '{"pdf": 2}') AS r2 \gset
SELECT pgq.enqueue('send', '{"mail": 1}', after => ARRAY[:r1, :r2, :r1]) AS s1 \gset
SELECT pgq.enqueue('send', '{"mail": 2}', after => ARRAY[:s1]) AS s2 \gset
SELECT id - :r1 AS job, state, open_parents, has_dependents FROM pgq.jobs ORDER BY id;
SELECT parent_id - :r1 AS parent, child_id - :r1 AS child FROM pgq.job_dependencies ORDER BY 1, 2;
-- pgq.job shows them waiting, with the parents still open.
SELECT id - :r1 AS job, state, open_parents FROM pgq.job(:s1);
SELECT queue, ready, awaiting_parents FROM pgq.queue_stats ORDER BY queue;
-- Waiting jobs are never claimed.
SELECT id - :r1 AS job FROM pgq.claim(ARRAY['render', 'send'], 10);
SELECT pgq.complete(:r1, 1);
SELECT id - :r1 AS job, state, open_parents FROM pgq.jobs ORDER BY id;
-- The last parent's completion makes the child ready, in its transaction.
BEGIN;
SELECT pgq.complete(:r2, 1);
SELECT id - :r1 AS job, state, open_parents FROM pgq.jobs ORDER BY id;
ROLLBACK;
SELECT state, open_parents FROM pgq.jobs WHERE id = :s1;
SELECT pgq.complete_many(ARRAY[:r2]::bigint[], ARRAY[1]);
SELECT id - :r1 AS job FROM pgq.claim('send', 10);
SELECT pgq.complete(:s1, 1, '{"sent": true}');
SELECT id - :r1 AS job, state FROM pgq.jobs ORDER BY id;

-- A parent already done is no wait at all; enqueue_many puts every job
-- behind the same parents.
SELECT pgq.enqueue('send', '{"late": true}', after => ARRAY[:r1]) AS late \gset
SELECT state, open_parents FROM pgq.jobs WHERE id = :late;
SELECT pgq.enqueue('render', '{"pdf": 3}') AS r3 \gset
SELECT count(*) AS thumbnails
  FROM pgq.enqueue_many('send', ARRAY['{"t": 1}', '{"t": 2}', '{"t": 3}']::jsonb[], after => ARRAY[:r3]);
SELECT count(*) AS waiting FROM pgq.jobs WHERE state = 'b' AND open_parents = 1;

-- A parent that dies takes its dependents, and theirs, to dead-letter.
SELECT pgq.enqueue('send', '{"log": true}', after => ARRAY[(SELECT max(id) FROM pgq.jobs)]) AS grandchild \gset
SELECT pgq.cancel(:r3);
SELECT id - :r1 AS job, reason, last_error IS NOT NULL AS says_why
  FROM pgq.dead_jobs ORDER BY id;
SELECT (SELECT count(*) FROM pgq.job_dependencies) AS dependency_rows,
       (SELECT count(*) FROM pgq.dependency_failures) AS failures;

-- A wide graph is cascaded in bounded steps: the dying transaction takes
-- 1,000 dependents, maintenance the rest.
SELECT pgq.enqueue('render', '{"pdf": "wide"}') AS wide \gset
SELECT count(*) AS fanned_out
  FROM pgq.enqueue_many('send', array_fill('{"t": 1}'::jsonb, ARRAY[1500]), after => ARRAY[:wide]);
SELECT pgq.cancel(:wide);
SELECT (SELECT count(*) FROM pgq.dead_jobs WHERE reason = 'dependency_failed'
          AND last_error = 'parent job ' || :wide || ' did not complete') AS dead_now,
       (SELECT count(*) FROM pgq.jobs WHERE state = 'b') AS still_waiting,
       (SELECT count(*) FROM pgq.dependency_failures) AS failures_left;
SELECT expired_requeued FROM pgq.maintain();
SELECT (SELECT count(*) FROM pgq.dead_jobs WHERE reason = 'dependency_failed'
          AND last_error = 'parent job ' || :wide || ' did not complete') AS dead_after,
       (SELECT count(*) FROM pgq.jobs WHERE state = 'b') AS still_waiting,
       (SELECT count(*) FROM pgq.dependency_failures) AS failures_left;

-- A wide fan-out is released in bounded steps too (issue 30, D4): another
-- team's producer may attach thousands of jobs to a job, and that job's
-- completion makes at most 1,000 of them ready in its own transaction;
-- maintenance releases the rest. Each is ready exactly once, and a child of
-- two parents (fan-in) still waits for both.
SELECT pgq.create_queue('team_a');
SELECT pgq.create_queue('team_b');
SELECT pgq.enqueue('team_a', '{"big": true}') AS big \gset
SELECT pgq.enqueue('team_a', '{"other": true}') AS other \gset
SELECT count(*) AS attached
  FROM pgq.enqueue_many('team_b', array_fill('{}'::jsonb, ARRAY[5000]), after => ARRAY[:big]);
SELECT pgq.enqueue('team_b', '{"fan_in": true}', after => ARRAY[:big, :other]) AS both \gset
BEGIN;
SELECT COALESCE(seq_tup_read, 0) + COALESCE(idx_tup_fetch, 0) AS read_before
  FROM pg_stat_xact_user_tables WHERE relid = 'pgq.job_dependencies'::regclass \gset
SELECT id = :big AS is_big, pgq.complete(id, attempt) FROM pgq.claim('team_a');
-- Rows of pgq.job_dependencies the completion read, as this transaction's
-- statistics count them: about what it released.
SELECT COALESCE(seq_tup_read, 0) + COALESCE(idx_tup_fetch, 0) - :read_before < 1100 AS bounded_read
  FROM pg_stat_xact_user_tables WHERE relid = 'pgq.job_dependencies'::regclass;
SELECT (SELECT count(*) FROM pgq.list_jobs('team_b', 'ready', 10000)) AS ready_now,
       (SELECT count(*) FROM pgq.jobs WHERE state = 'b') AS still_waiting,
       (SELECT count(*) FROM pgq.dependency_releases WHERE parent_id = :big) AS releases_left;
COMMIT;
SELECT expired_requeued FROM pgq.maintain();
SELECT (SELECT count(*) FROM pgq.list_jobs('team_b', 'ready', 10000)) AS ready_after,
       (SELECT count(*) FROM pgq.jobs WHERE state = 'b') AS still_waiting,
       (SELECT count(*) FROM pgq.job_dependencies WHERE parent_id = :big) AS rows_left,
       (SELECT count(*) FROM pgq.dependency_releases) AS releases_left;
SELECT state, open_parents FROM pgq.job(:both);
SELECT pgq.complete(id, attempt) FROM pgq.claim('team_a');
SELECT state, open_parents FROM pgq.job(:both);
SELECT count(*) AS claimed, count(DISTINCT id) AS distinct_jobs FROM pgq.claim('team_b', 10000);
-- complete_many shares one bound among the parents it completes.
SELECT array_agg(id) AS pair FROM pgq.enqueue_many('team_a', ARRAY['{}', '{}']::jsonb[]) AS id \gset
SELECT count(*) AS attached
  FROM unnest(:'pair'::bigint[]) AS p,
       pgq.enqueue_many('team_b', array_fill('{}'::jsonb, ARRAY[700]), after => ARRAY[p]);
BEGIN;
SELECT pgq.complete_many(array_agg(id), array_agg(attempt)) FROM pgq.claim('team_a', 2);
SELECT (SELECT count(*) FROM pgq.list_jobs('team_b', 'ready', 10000)) AS ready_now,
       (SELECT count(*) FROM pgq.jobs WHERE state = 'b') AS still_waiting,
       (SELECT count(*) FROM pgq.dependency_releases) AS releases_left;
COMMIT;
SELECT expired_requeued FROM pgq.maintain();
SELECT (SELECT count(*) FROM pgq.list_jobs('team_b', 'ready', 10000)) AS ready_after,
       (SELECT count(*) FROM pgq.jobs WHERE state = 'b') AS still_waiting,
       (SELECT count(*) FROM pgq.dependency_releases) AS releases_left;
SELECT count(*) AS claimed, count(DISTINCT id) AS distinct_jobs FROM pgq.claim('team_b', 10000);

-- The statement in which a parent dies reads about as many rows of
-- pgq.job_dependencies as it dead-letters, however many dependents that
-- parent or another (a live one, listed first) has: 2.0 read every row of
-- the dying parent to record it, and could read other parents' rows to
-- find its own. Rows read, as this transaction's statistics count them.
SELECT pgq.enqueue('team_a', '{"live": true}') AS live \gset
SELECT pgq.enqueue('team_a', '{"dies": true}') AS dies \gset
SELECT count(*) AS attached
  FROM unnest(ARRAY[:live, :dies]::bigint[]) AS p,
       pgq.enqueue_many('team_b', array_fill('{}'::jsonb, ARRAY[5000]), after => ARRAY[p]);
ANALYZE pgq.job_dependencies;
BEGIN;
SELECT COALESCE(seq_tup_read, 0) + COALESCE(idx_tup_fetch, 0) AS read_before
  FROM pg_stat_xact_user_tables WHERE relid = 'pgq.job_dependencies'::regclass \gset
SELECT pgq.cancel(:dies);
SELECT COALESCE(seq_tup_read, 0) + COALESCE(idx_tup_fetch, 0) - :read_before < 1100 AS bounded_read,
       (SELECT count(*) FROM pgq.job_dependencies WHERE parent_id = :dies) AS rows_left
  FROM pg_stat_xact_user_tables WHERE relid = 'pgq.job_dependencies'::regclass;
COMMIT;
SELECT expired_requeued FROM pgq.maintain();
SELECT (SELECT count(*) FROM pgq.job_dependencies WHERE parent_id = :dies) AS rows_left,
       (SELECT count(*) FROM pgq.job_dependencies WHERE parent_id = :live) AS live_rows;
SELECT pgq.cancel(:live);
SELECT expired_requeued FROM pgq.maintain();
SELECT count(*) AS left_waiting FROM pgq.jobs WHERE state = 'b';

-- A job in a FIFO group joins its group's line when its parents are done.
SELECT pgq.create_queue('chat');
SELECT pgq.enqueue('render', '{"pdf": 9}') AS r9 \gset
SELECT pgq.enqueue('chat', '{"m": 1}', group_key => 'ann', after => ARRAY[:r9]) AS m1 \gset
SELECT pgq.enqueue('chat', '{"m": 2}', group_key => 'ann') AS m2 \gset
SELECT payload->>'m' AS m, state FROM pgq.jobs WHERE group_key = 'ann' ORDER BY id;
SELECT pgq.complete(id, attempt) FROM pgq.claim('render', 10) WHERE id = :r9;
SELECT payload->>'m' AS m, state FROM pgq.jobs WHERE group_key = 'ann' ORDER BY id;

-- A parent dead after its attempts, and a queue dropped with force, fail
-- their dependents too (in other queues as well).
SELECT pgq.create_queue('once', max_attempts => 1);
SELECT pgq.enqueue('once', '{}') AS o1 \gset
SELECT pgq.enqueue('send', '{"after": "once"}', after => ARRAY[:o1]) AS x1 \gset
SELECT pgq.fail(id, attempt, 'boom') FROM pgq.claim('once');
SELECT reason FROM pgq.dead_jobs WHERE id = :x1;
SELECT pgq.enqueue('once', '{}') AS o2 \gset
SELECT pgq.enqueue('send', '{"after": "dropped"}', after => ARRAY[:o2]) AS y1 \gset
SELECT pgq.drop_queue('once', force => true);
SELECT reason FROM pgq.dead_jobs WHERE id = :y1;

-- Rights: a right on each parent's queue; a job of a queue the caller holds
-- none on is answered as one that does not exist, whatever its state
-- (issue 30, D1: 2.0 accepted a completed one, telling another team when
-- its job finished). A job completed without a trace names no queue: done
-- only for a caller with a right on every queue.
CREATE ROLE deps_producer;
SELECT pgq.grant('deps_producer', 'send', 'produce');
SELECT pgq.create_queue('kept', keep_completed => '1 day');
SELECT pgq.enqueue('render', '{"secret": true}') AS secret \gset
CREATE FUNCTION after_answer(parent bigint, many boolean DEFAULT false) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
  IF many THEN
    PERFORM pgq.enqueue_many('send', ARRAY['{}']::jsonb[], after => ARRAY[parent]);
  ELSE
    PERFORM pgq.enqueue('send', '{}', after => ARRAY[parent]);
  END IF;
  RETURN 'accepted';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ' ' || regexp_replace(SQLERRM, '[0-9]+', 'N');
END $$;
GRANT EXECUTE ON FUNCTION after_answer(bigint, boolean) TO deps_producer;
SELECT pgq.create_queue('other');
SELECT pgq.enqueue('other', '{"state": "done"}') AS other_done \gset
SELECT pgq.complete(id, attempt) FROM pgq.claim('other');
SELECT pgq.enqueue('other', '{"state": "running"}') AS other_running \gset
SELECT id = :other_running AS running FROM pgq.claim('other');
SELECT pgq.enqueue('other', '{"state": "dead"}') AS other_dead \gset
SELECT pgq.cancel(:other_dead);
SELECT pgq.enqueue('other', '{"state": "pending"}') AS other_pending \gset
SELECT pgq.enqueue('kept', '{"state": "done, kept"}') AS other_kept \gset
SELECT pgq.complete(id, attempt) FROM pgq.claim('kept');
SELECT pgq.create_queue('own');
SELECT pgq.grant('deps_producer', 'own', 'produce');
SELECT pgq.enqueue('own', '{"state": "done"}') AS own_done \gset
SELECT pgq.complete(id, attempt) FROM pgq.claim('own');
SELECT pgq.enqueue('own', '{"state": "dead"}') AS own_dead \gset
SELECT pgq.cancel(:own_dead);
SET ROLE deps_producer;
SELECT what, after_answer(id) AS answer, after_answer(id, many => true) = after_answer(id) AS same_in_enqueue_many
  FROM (VALUES
  ('pending', :other_pending), ('running', :other_running), ('done', :other_done),
  ('done, kept', :other_kept), ('dead', :other_dead), ('never issued', 999999999),
  ('own: done without a trace', :own_done), ('own: dead', :own_dead)) AS t(what, id);
\set VERBOSITY terse
SELECT pgq.enqueue('send', '{}', after => ARRAY[:secret]);
SELECT pgq.enqueue('send', '{}', after => ARRAY[:s2]) IS NOT NULL AS allowed;
RESET ROLE;
-- A role with a right on every queue (here the superuser) finds a job done
-- without a trace done.
SELECT after_answer(:own_done) AS answer;

-- Bad input: clear errors, nothing written.
SELECT count(*) AS jobs_before FROM pgq.jobs \gset
SELECT pgq.enqueue('send', '{}', after => ARRAY[999999999]);
SELECT pgq.enqueue('send', '{}', after => ARRAY[:r3]);
SELECT pgq.enqueue('send', '{}', after => ARRAY[:r1, NULL]);
SELECT pgq.enqueue('send', '{}', after => ARRAY(SELECT generate_series(1, 10001)::bigint));
SELECT pgq.enqueue('send', '{}', after => ARRAY[ARRAY[1], ARRAY[2]]::bigint[]);
SELECT pgq.enqueue('send', '{}', dedupe_key => 'k', on_duplicate => 'replace', after => ARRAY[:r1]);
SELECT pgq.enqueue_many('send', ARRAY['{}']::jsonb[], after => ARRAY[999999999]);
SELECT count(*) = :jobs_before AS nothing_written FROM pgq.jobs;
-- An empty list is no dependency.
SELECT pgq.enqueue('send', '{}', after => ARRAY[]::bigint[]) AS free \gset
SELECT state, open_parents FROM pgq.jobs WHERE id = :free;
DROP FUNCTION after_answer(bigint, boolean);
DROP ROLE deps_producer;
DROP EXTENSION pgq_cpp;
