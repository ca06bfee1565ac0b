-- Dependencies on ring jobs (issue 33, ADR 0028 "Dependencies on ring
-- jobs"): a job may wait for jobs of a ring queue, pending or running,
-- named in after, as for jobs of pgq.job_rows. The parents stay on their
-- ring; their end settles the children: a completion (complete,
-- complete_many) releases them, a death (attempts spent, a cancel while
-- pending) dead-letters them with reason dependency_failed. A parent done
-- without a trace is done for a role with a right on every queue, one kept
-- by its queue is done for its readers, and both are unknown (23503) to a
-- role without a right on their queue.
CREATE EXTENSION pgq_cpp;

SELECT pgq.create_queue('parents', lease => '1 hour', max_attempts => 1);
SELECT pgq.create_queue('kept', keep_completed => '1 hour');
SELECT pgq.create_queue('children');
SELECT name, ring_id IS NOT NULL AS on_a_ring FROM pgq.queues ORDER BY name;

CREATE TEMP TABLE enq (k text PRIMARY KEY, id bigint NOT NULL);
INSERT INTO enq SELECT 'p' || o, id
  FROM pgq.enqueue_many('parents', array_fill('{}'::jsonb, ARRAY[5])) WITH ORDINALITY AS e(id, o);
CREATE FUNCTION pg_temp.id(text) RETURNS bigint LANGUAGE sql AS 'SELECT id FROM enq WHERE k = $1';
CREATE FUNCTION pg_temp.child(k text, VARIADIC parents text[]) RETURNS void LANGUAGE sql AS $$
  INSERT INTO enq SELECT k, pgq.enqueue('children', jsonb_build_object('k', k),
                                        after => (SELECT array_agg(pg_temp.id(p)) FROM unnest(parents) p))
$$;
-- Each child by its state, parents left and why it died.
CREATE FUNCTION pg_temp.children() RETURNS TABLE (k text, state text, open_parents int, dead_reason text)
LANGUAGE sql AS $$
  SELECT e.k, i.state, i.open_parents, i.dead_reason
    FROM enq e, pgq.job(e.id) i WHERE e.k LIKE 'c%' ORDER BY e.k
$$;
-- The parents are on their ring, not rows.
SELECT count(*) AS parent_rows FROM pgq.job_rows j JOIN enq e USING (id);

-- Children of a pending parent, of a running one, of both.
SELECT id = pg_temp.id('p1') AS p1_runs FROM pgq.claim('parents', 1);
SELECT pg_temp.child('c1', 'p1'), pg_temp.child('c2', 'p2'), pg_temp.child('c12', 'p1', 'p2');
SELECT * FROM pg_temp.children();
-- p1 completes: c1 is ready, c12 waits for p2.
SELECT pgq.complete(pg_temp.id('p1'), 1) AS p1_done;
SELECT * FROM pg_temp.children();
-- p2 is claimed and completed by complete_many: c2 and c12 are ready.
SELECT id = pg_temp.id('p2') AS p2_runs FROM pgq.claim('parents', 1);
SELECT pgq.complete_many(ARRAY[pg_temp.id('p2')], ARRAY[1]) AS p2_done;
SELECT * FROM pg_temp.children();

-- A parent that fails with its attempts spent: its child dies.
SELECT id = pg_temp.id('p3') AS p3_runs FROM pgq.claim('parents', 1);
SELECT pg_temp.child('c3', 'p3');
SELECT pgq.fail(pg_temp.id('p3'), 1, 'boom') AS p3_failed;
-- A parent cancelled while pending (a tombstone on its ring): its child dies.
SELECT pg_temp.child('c4', 'p4');
SELECT pgq.cancel(pg_temp.id('p4')) AS p4_cancelled;
SELECT * FROM pg_temp.children() WHERE k IN ('c3', 'c4');

-- Parents already done: the child is ready at once (a superuser holds a
-- right on every queue, so a job done without a trace is done for it).
SELECT id = pg_temp.id('p5') AS p5_runs FROM pgq.claim('parents', 1);
SELECT pgq.complete(pg_temp.id('p5'), 1) AS p5_done;
SELECT pg_temp.child('c5', 'p5');
INSERT INTO enq SELECT 'k1', pgq.enqueue('kept', '{}');
SELECT pgq.complete(id, attempt) AS k1_done FROM pgq.claim('kept', 1);
SELECT pg_temp.child('c6', 'k1');
SELECT * FROM pg_temp.children() WHERE k IN ('c5', 'c6');

-- A parent and its child enqueued in one transaction; the child waits,
-- then is released by the parent's completion.
BEGIN;
INSERT INTO enq SELECT 'p7', pgq.enqueue('parents', '{}');
SELECT pg_temp.child('c7', 'p7');
COMMIT;
SELECT * FROM pg_temp.children() WHERE k = 'c7';
SELECT pgq.complete(id, attempt) AS p7_done FROM pgq.claim('parents', 1);
SELECT * FROM pg_temp.children() WHERE k = 'c7';

-- A ring parent with 5,000 children: its completion reads about what it
-- releases (1,000 now, the rest by maintenance), not every pair (the look
-- for children is one probe of the pairs' index a job).
SELECT pgq.enqueue('parents', '{}') AS big \gset
SELECT count(*) AS attached
  FROM pgq.enqueue_many('children', array_fill('{}'::jsonb, ARRAY[5000]), after => ARRAY[:big]);
SELECT id = :big AS big_runs FROM pgq.claim('parents', 1);
BEGIN;
SELECT COALESCE(seq_tup_read, 0) + COALESCE(idx_tup_fetch, 0) AS read_before
  FROM pg_stat_xact_user_tables WHERE relid = 'pgq.job_dependencies'::regclass \gset
SELECT pgq.complete(:big, 1) AS big_done;
SELECT COALESCE(seq_tup_read, 0) + COALESCE(idx_tup_fetch, 0) - :read_before < 1100 AS bounded_read
  FROM pg_stat_xact_user_tables WHERE relid = 'pgq.job_dependencies'::regclass;
COMMIT;
SELECT count(*) AS left_for_maintenance FROM pgq.job_dependencies WHERE parent_id = :big;
SELECT count(*) > 0 AS tended FROM pgq.maintain();
SELECT count(*) AS pairs_of_big FROM pgq.job_dependencies WHERE parent_id = :big;

-- drop_queue with force of a ring queue fails the children of its jobs
-- (as of a queue without a ring).
SELECT pgq.create_queue('doomed');
INSERT INTO enq SELECT 'd1', pgq.enqueue('doomed', '{}');
SELECT pg_temp.child('c9', 'd1');
SELECT pgq.drop_queue('doomed', force => true);
SELECT * FROM pg_temp.children() WHERE k = 'c9';

-- Only the ends of jobs of a queue whose jobs children named look for
-- children (a lock of the job, kind 6 of pgq's advisory tags, and one index
-- probe): another ring queue's completions pay nothing for them.
SELECT pgq.create_queue('unrelated');
SELECT pgq.enqueue('unrelated', '{}') AS u1 \gset
SELECT pgq.enqueue('parents', '{}') AS p10 \gset
SELECT (SELECT id FROM pgq.claim('unrelated', 1)) = :u1 AND (SELECT id FROM pgq.claim('parents', 1)) = :p10 AS both_run;
BEGIN;
SELECT pgq.complete(:u1, 1) AS unrelated_done;
SELECT count(*) AS parent_locks_unrelated FROM pg_locks
 WHERE locktype = 'advisory' AND objsubid = 6 AND pid = pg_backend_pid();
SELECT pgq.complete(:p10, 1) AS parents_queue_done;
SELECT count(*) AS parent_locks_parents_queue FROM pg_locks
 WHERE locktype = 'advisory' AND objsubid = 6 AND pid = pg_backend_pid();
COMMIT;

-- A parent of another team's ring queue is unknown to a role without a
-- right on it, whatever its state.
CREATE ROLE ring_dep_stranger;
SELECT pgq.grant('ring_dep_stranger', 'children', 'produce');
SELECT pgq.enqueue('parents', '{}') AS p8 \gset
SELECT pgq.claim('parents', 1) IS NOT NULL AS p8_runs;
SELECT pgq.enqueue('parents', '{}') AS p9 \gset
SET ROLE ring_dep_stranger;
\set VERBOSITY sqlstate
SELECT pgq.enqueue('children', '{}', after => ARRAY[:p8]);
SELECT pgq.enqueue('children', '{}', after => ARRAY[:p9]);
\set VERBOSITY default
RESET ROLE;

-- Nothing is left waiting: every child settled with its parents.
SELECT count(*) AS waiting FROM pgq.jobs WHERE state = 'b';
SELECT count(*) AS pairs_left FROM pgq.job_dependencies;

SELECT pgq.revoke('ring_dep_stranger', 'children', 'produce');
DROP ROLE ring_dep_stranger;
DROP EXTENSION pgq_cpp;
