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
-- none on is answered as one that does not exist.
CREATE ROLE deps_producer;
SELECT pgq.grant('deps_producer', 'send', 'produce');
SELECT pgq.enqueue('render', '{"secret": true}') AS secret \gset
SET ROLE deps_producer;
\set VERBOSITY terse
SELECT pgq.enqueue('send', '{}', after => ARRAY[:secret]);
SELECT pgq.enqueue('send', '{}', after => ARRAY[:s2]) IS NOT NULL AS allowed;
RESET ROLE;

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
DROP ROLE deps_producer;
DROP EXTENSION pgq_cpp;
