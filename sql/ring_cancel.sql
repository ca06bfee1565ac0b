-- Cancel of a job of a ring queue (issue 33, ADR 0028 "Tombstones"). A job
-- still in its ring gets a tombstone: the lane notes it so that no claim
-- hands it out (or takes it out of the entries given back), it goes to
-- dead-letter with reason cancelled as a pending job of pgq.job_rows does, and
-- a closure on the ring finishes it. A running one is cancelled as before.
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('rc', lease => '1 hour');
CREATE TEMP TABLE enq (k text PRIMARY KEY, id bigint NOT NULL UNIQUE);
CREATE FUNCTION pg_temp.job(bigint) RETURNS text LANGUAGE sql AS 'SELECT k FROM enq WHERE id = $1';
CREATE FUNCTION pg_temp.put(text) RETURNS void LANGUAGE sql
  AS $$INSERT INTO enq VALUES ($1, pgq.enqueue('rc', jsonb_build_object('k', $1)))$$;
CREATE FUNCTION pg_temp.cancel(text) RETURNS boolean LANGUAGE sql
  AS $$SELECT pgq.cancel(id) FROM enq WHERE k = $1$$;
CREATE FUNCTION pg_temp.claim(n int) RETURNS TABLE (job text, attempt int)
  LANGUAGE sql AS 'SELECT pg_temp.job(id), attempt FROM pgq.claim(''rc'', $1) ORDER BY id';

-- A job ahead of the claim cursor: cancelled, never handed out.
SELECT pg_temp.put('a'), pg_temp.put('b'), pg_temp.put('c'), pg_temp.put('d');
SELECT pg_temp.cancel('b') AS cancelled;
SELECT pg_temp.cancel('b') AS cancelled_again;
SELECT pgq.cancel_job(id) AS outcome FROM enq WHERE k = 'b';
SELECT * FROM pg_temp.claim(10);
SELECT pg_temp.job(id) AS job, queue, reason, attempts, payload->>'k' AS payload
  FROM pgq.dead_jobs ORDER BY id;
SELECT pg_temp.job(id) AS job, state FROM pgq.list_jobs('rc') ORDER BY id;
-- Its closure is on the ring, in its entry's segment.
SELECT l.kind, l.attempt, l.outcome FROM pgq.job_log l JOIN enq e USING (id)
 WHERE e.k = 'b' ORDER BY l.kind DESC;

-- A job given back by a claim that rolled back: taken out of the list.
SELECT pg_temp.put('e');
BEGIN;
SELECT * FROM pg_temp.claim(1);
ROLLBACK;
SELECT pg_temp.cancel('e') AS cancelled;
SELECT count(*) AS handed_out FROM pg_temp.claim(10);

-- A cancel that rolls back leaves the job as it was: handed out in order.
SELECT pg_temp.put('f'), pg_temp.put('g');
BEGIN;
SELECT pg_temp.cancel('f') AS cancelled;
ROLLBACK;
BEGIN;
SELECT pg_temp.put('h');
SELECT pg_temp.cancel('h') AS cancelled_in_its_enqueue;
ROLLBACK;
SELECT * FROM pg_temp.claim(10);

-- A given-back job cancelled in a transaction that rolls back: given back
-- again.
SELECT pg_temp.put('i');
BEGIN;
SELECT * FROM pg_temp.claim(1);
ROLLBACK;
BEGIN;
SELECT pg_temp.cancel('i') AS cancelled;
ROLLBACK;
SELECT * FROM pg_temp.claim(10);

-- A running job: cancelled on its ring (its claim is fenced at once): a
-- closure 'x' and its dead-letter row, never a row of pgq.job_rows.
SELECT pgq.cancel(id) AS cancelled FROM enq WHERE k = 'a';
SELECT pgq.complete(id, 1) AS completed_after FROM enq WHERE k = 'a';
SELECT j.state, j.attempt, j.dead_reason FROM enq e, pgq.job(e.id) j WHERE e.k = 'a';
SELECT l.outcome, l.attempt FROM enq e, pgq.job_log l WHERE e.k = 'a' AND l.id = e.id AND l.kind = 'c';

-- The segment of cancelled jobs is truncated once its last job is done.
SET pgq.ring_turn = '1min';
SELECT pg_temp.put('j');
SELECT pg_temp.cancel('j') AS cancelled;
SELECT pgq.complete(id, 1) AS completed FROM enq WHERE k IN ('c', 'd', 'f', 'g', 'i') ORDER BY id;
SET pgq.debug_clock_offset = '61s';
SELECT count(*) AS maintained FROM pgq.maintain();
SET pgq.debug_clock_offset = '122s';
SELECT count(*) AS maintained FROM pgq.maintain();
SELECT s.segment, s.empty FROM pgq.ring_segments s JOIN pgq.queues q USING (ring_id)
 WHERE q.name = 'rc' ORDER BY s.segment;
RESET pgq.debug_clock_offset;
RESET pgq.ring_turn;
SELECT count(*) AS on_the_ring FROM pgq.job_log l JOIN pgq.queues q ON q.ring_id = l.ring
 WHERE q.name = 'rc';

-- Rights: a role without a right on the queue cannot cancel its jobs.
SELECT pg_temp.put('k');
SELECT id AS k_id FROM enq WHERE k = 'k' \gset
CREATE ROLE pgq_regress_rc_stranger;
GRANT USAGE ON SCHEMA pgq TO pgq_regress_rc_stranger;
SET ROLE pgq_regress_rc_stranger;
\set VERBOSITY sqlstate
SELECT pgq.cancel(:k_id) AS cancelled;
\set VERBOSITY default
RESET ROLE;
REVOKE USAGE ON SCHEMA pgq FROM pgq_regress_rc_stranger;
DROP ROLE pgq_regress_rc_stranger;
SELECT * FROM pg_temp.claim(10);

DROP EXTENSION pgq_cpp;
