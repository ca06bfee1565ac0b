-- A job that runs past the ring's turns is carried out of its segment
-- (issue 33, ADR 0028 "Reclaiming"): when the ring is due to turn onto a
-- segment that still holds running jobs (leases extended past the turns),
-- the maintenance moves them into pgq.job_rows with their attempt and
-- lease, so that the segment is truncated and the ring turns on; the
-- worker's completion finds the job there. Pending jobs (a backlog deeper
-- than the ring) are not carried: the ring waits for them. The clock is
-- moved on by pgq.debug_clock_offset (one turn is 1 minute).
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('carry', lease => '1 hour');
SET pgq.ring_turn = '1min';

CREATE TEMP TABLE enq (k text PRIMARY KEY, id bigint NOT NULL UNIQUE);
CREATE FUNCTION pg_temp.job(bigint) RETURNS text LANGUAGE sql AS 'SELECT k FROM enq WHERE id = $1';
CREATE FUNCTION pg_temp.put(text) RETURNS void LANGUAGE sql
  AS $$INSERT INTO enq VALUES ($1, pgq.enqueue('carry', jsonb_build_object('k', $1)))$$;
CREATE FUNCTION pg_temp.id(text) RETURNS bigint LANGUAGE sql AS 'SELECT id FROM enq WHERE k = $1';
CREATE FUNCTION pg_temp.ledger() RETURNS TABLE (current smallint, segments text)
  LANGUAGE sql AS $$
  SELECT r.current,
         string_agg(s.segment || CASE WHEN s.empty THEN ':empty' ELSE ':rows' END, ' ' ORDER BY s.segment)
    FROM pgq.rings r JOIN pgq.ring_segments s USING (ring_id)
   WHERE r.ring_id = (SELECT ring_id FROM pgq.queues WHERE name = 'carry')
   GROUP BY 1$$;
CREATE FUNCTION pg_temp.state(text) RETURNS TABLE (job text, in_rows boolean, state text, attempt int)
  LANGUAGE sql AS $$
  SELECT $1, EXISTS (SELECT 1 FROM pgq.job_rows WHERE id = pg_temp.id($1)), j.state, j.attempt
    FROM pgq.jobs j WHERE j.id = pg_temp.id($1)$$;

-- 'long' is claimed in segment 0 and runs for the hour of its lease;
-- 'waiting' is put after it and stays pending. 'long' has a trace context
-- (issue 35), which its move keeps.
SET pgq.trace_context = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01;congo=t61rcWkgMzE';
SELECT pg_temp.put('long');
RESET pgq.trace_context;
SELECT pg_temp.job(id), attempt FROM pgq.claim('carry', 1);
SELECT pg_temp.put('waiting');
SELECT lease_until AS long_lease FROM pgq.jobs WHERE id = pg_temp.id('long') \gset

-- Three turns: segments 1, 2 and 3 each take a job (pending too).
SET pgq.debug_clock_offset = '61s';
SELECT count(*) >= 0 AS maintained FROM pgq.maintain();
SELECT pg_temp.put('t1');
SET pgq.debug_clock_offset = '122s';
SELECT count(*) >= 0 AS maintained FROM pgq.maintain();
SELECT pg_temp.put('t2');
SET pgq.debug_clock_offset = '183s';
SELECT count(*) >= 0 AS maintained FROM pgq.maintain();
SELECT pg_temp.put('t3');
SELECT * FROM pg_temp.ledger();

-- Due to turn onto segment 0: 'long', running, is carried into
-- pgq.job_rows, its attempt and lease kept; 'waiting', pending, is not,
-- and the ring waits for it.
SET pgq.debug_clock_offset = '244s';
SELECT count(*) >= 0 AS maintained FROM pgq.maintain();
SELECT * FROM pg_temp.ledger();
SELECT * FROM pg_temp.state('long');

SELECT lease_until = :'long_lease' AS lease_kept, trace_context FROM pgq.jobs WHERE id = pg_temp.id('long');
SELECT count(*) AS long_rows_on_ring FROM pgq.job_log WHERE id = pg_temp.id('long') AND kind <> 'c';
SELECT queue, claimer_pid = pg_backend_pid() AS claimed_here FROM pgq.running_jobs;

-- The pending jobs claimed and done: segment 0 is truncated (with the
-- carried job's rows) and the ring turns onto it.
SELECT pg_temp.job(id), pgq.complete(id, attempt) FROM pgq.claim('carry', 10) ORDER BY id;
SET pgq.debug_clock_offset = '305s';
SELECT count(*) >= 0 AS maintained FROM pgq.maintain();
SELECT count(*) >= 0 AS maintained FROM pgq.maintain();
SELECT * FROM pg_temp.ledger();
SELECT * FROM pg_temp.state('long');
SELECT count(*) AS long_rows_on_ring FROM pgq.job_log WHERE id = pg_temp.id('long');

-- Its worker's attempt completes it there; a later one was never its.
SELECT pgq.complete(pg_temp.id('long'), 2) AS other_attempt;
SELECT pgq.complete(pg_temp.id('long'), 1) AS its_attempt;
SELECT pgq.complete(pg_temp.id('long'), 1) AS again;
SELECT count(*) AS unfinished FROM pgq.jobs;

RESET pgq.debug_clock_offset;
DROP EXTENSION pgq_cpp;
