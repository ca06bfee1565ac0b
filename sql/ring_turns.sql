-- A queue's ring turns and is truncated (issue 33, ADR 0028 "Reclaiming").
-- The maintenance turns the ring onto its next segment once the current one
-- has taken entries for pgq.ring_turn and the next one is empty, and
-- truncates a sealed segment once every job in it has finished. Entries go
-- to the current segment of the newest turn; a receipt or closure goes to
-- its entry's segment. The claim cursor walks the segments in ring order.
-- The clock is moved on by pgq.debug_clock_offset (one turn is 1 minute).
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('turns', lease => '5 minutes');
SELECT ring_id AS ring FROM pgq.queues WHERE name = 'turns' \gset
SET pgq.ring_turn = '1min';

-- Each job by a name its payload carries.
CREATE TEMP TABLE enq (k text PRIMARY KEY, id bigint NOT NULL UNIQUE);
CREATE FUNCTION pg_temp.job(bigint) RETURNS text LANGUAGE sql AS 'SELECT k FROM enq WHERE id = $1';
CREATE FUNCTION pg_temp.put(text) RETURNS void LANGUAGE sql
  AS $$INSERT INTO enq VALUES ($1, pgq.enqueue('turns', jsonb_build_object('k', $1)))$$;
-- The ring's rows: which segment each job's rows are in.
CREATE FUNCTION pg_temp.rows() RETURNS TABLE (segment smallint, job text, kinds text)
  LANGUAGE sql AS $$
  SELECT l.segment, pg_temp.job(l.id), string_agg(l.kind::text, '' ORDER BY l.kind DESC)
    FROM pgq.job_log l WHERE l.ring = (SELECT ring_id FROM pgq.queues WHERE name = 'turns')
   GROUP BY 1, 2 ORDER BY 1, 2$$;
CREATE FUNCTION pg_temp.ledger() RETURNS TABLE (current smallint, generation bigint, segments text)
  LANGUAGE sql AS $$
  SELECT r.current, r.generation,
         string_agg(s.segment || CASE WHEN s.empty THEN ':empty' ELSE ':rows' END, ' ' ORDER BY s.segment)
    FROM pgq.rings r JOIN pgq.ring_segments s USING (ring_id)
   WHERE r.ring_id = (SELECT ring_id FROM pgq.queues WHERE name = 'turns')
   GROUP BY 1, 2$$;
CREATE FUNCTION pg_temp.claim(n int) RETURNS TABLE (job text, attempt int)
  LANGUAGE sql AS 'SELECT pg_temp.job(id), attempt FROM pgq.claim(''turns'', $1) ORDER BY id';
CREATE FUNCTION pg_temp.done(k text) RETURNS boolean
  LANGUAGE sql AS $$SELECT pgq.complete(id, 1) FROM enq WHERE enq.k = $1$$;

-- Segment 0 takes the first jobs; a claim's receipt lies beside its entry.
SELECT pg_temp.put('a'), pg_temp.put('b'), pg_temp.put('c');
SELECT * FROM pg_temp.claim(1);
SELECT * FROM pg_temp.rows();
SELECT * FROM pg_temp.ledger();

-- Not a turn's time yet: nothing moves.
SELECT count(*) AS maintained FROM pgq.maintain();
SELECT * FROM pg_temp.ledger();

-- A turn later: segment 1 takes new entries.
SET pgq.debug_clock_offset = '61s';
SELECT count(*) AS maintained FROM pgq.maintain();
SELECT * FROM pg_temp.ledger();
SELECT pg_temp.put('d'), pg_temp.put('e');
-- The claim takes segment 0's jobs first, then walks on into segment 1;
-- each receipt goes to its entry's segment.
SELECT * FROM pg_temp.claim(10);
SELECT * FROM pg_temp.rows();

-- Segment 0 is kept while a job of it runs (a is running)...
SELECT pg_temp.done('b'), pg_temp.done('c');
SET pgq.debug_clock_offset = '122s';
SELECT count(*) AS maintained FROM pgq.maintain();
SELECT * FROM pg_temp.ledger();
-- ... and truncated once its last job is done, also when the segment is
-- sealed by a second turn (segment 1 -> 2: it had entries) meanwhile.
SELECT pg_temp.done('a');
SELECT count(*) AS maintained FROM pgq.maintain();
SELECT * FROM pg_temp.ledger();
SELECT * FROM pg_temp.rows();

-- An idle ring does not turn: segment 2 has taken nothing.
SET pgq.debug_clock_offset = '183s';
SELECT count(*) AS maintained FROM pgq.maintain();
SELECT * FROM pg_temp.ledger();

-- A claim that rolled back gives its entry back, and the entry holds its
-- segment until it is claimed again and done.
SELECT pg_temp.put('f');
SET pgq.debug_clock_offset = '244s';
SELECT count(*) AS maintained FROM pgq.maintain();
SELECT * FROM pg_temp.ledger();
BEGIN;
SELECT * FROM pg_temp.claim(1);
ROLLBACK;
SELECT pg_temp.done('d'), pg_temp.done('e');
SET pgq.debug_clock_offset = '305s';
SELECT count(*) AS maintained FROM pgq.maintain();
SELECT * FROM pg_temp.ledger();
SELECT * FROM pg_temp.claim(10);
SELECT pg_temp.done('f');
SELECT count(*) AS maintained FROM pgq.maintain();
SELECT * FROM pg_temp.ledger();

-- Round the ring, twice: four jobs a turn, claimed and done in the same
-- turn, with one job (held) that runs for two turns. Every job is handed
-- out once, in the order it was enqueued; the ring holds the current
-- segment, the one sealed last, and the held job's.
SELECT pg_temp.put('held');
SELECT * FROM pg_temp.claim(1);
CREATE TEMP TABLE handed (round int, job text, attempt int);
CREATE TEMP TABLE kept (round int, segments_with_rows int, completed int);
DO $$
DECLARE
  r int;
  completed int;
BEGIN
  FOR r IN 1 .. 8 LOOP
    PERFORM pg_temp.put('r' || r || '.' || i) FROM generate_series(1, 4) AS i;
    INSERT INTO handed SELECT r, c.job, c.attempt FROM pg_temp.claim(4) AS c;
    SELECT count(*) FILTER (WHERE pgq.complete(e.id, 1)) INTO completed
      FROM enq e JOIN handed h ON h.job = e.k AND h.round = r;
    IF r = 3 THEN
      PERFORM pg_temp.done('held');
    END IF;
    PERFORM set_config('pgq.debug_clock_offset', (305 + 61 * r) || 's', false);
    PERFORM pgq.maintain();
    INSERT INTO kept SELECT r, count(*), completed FROM pgq.ring_segments
     WHERE ring_id = (SELECT ring_id FROM pgq.queues WHERE name = 'turns') AND NOT empty;
  END LOOP;
END $$;
SELECT count(*) AS handed, count(DISTINCT job) AS distinct_jobs, max(attempt) AS max_attempt
  FROM handed;
-- In enqueue order: each job handed out after every job enqueued before it.
SELECT bool_and(later.round >= earlier.round) AS in_order
  FROM handed earlier JOIN enq ee ON ee.k = earlier.job,
       handed later JOIN enq el ON el.k = later.job
 WHERE el.id > ee.id;
SELECT round, segments_with_rows, completed FROM kept ORDER BY round;
SELECT * FROM pg_temp.ledger();
SELECT count(*) AS nothing_left FROM pgq.claim('turns', 10);

-- A pass that finds a sealed segment still holding a live job takes no
-- transaction id (and writes no WAL): its rows are read under a share lock
-- first; the exclusive lock, whose acquisition takes one, only for a
-- segment whose jobs have all finished. (Found by make test-rings: every
-- idle pass took one.)
SET pgq.debug_clock_offset = '2h';
SELECT pg_temp.put('live');
SET pgq.debug_clock_offset = '122min';
SELECT count(*) > 0 AS passed FROM pgq.maintain();
SELECT * FROM pg_temp.ledger();
BEGIN;
SELECT count(*) > 0 AS passed FROM pgq.maintain();
SELECT pg_current_xact_id_if_assigned() IS NULL AS idle_pass_took_no_xid;
COMMIT;
SELECT * FROM pg_temp.claim(10);
SELECT pg_temp.done('live');
SELECT count(*) > 0 AS passed FROM pgq.maintain();
SELECT * FROM pg_temp.ledger();

-- drop_queue takes the ring out of the ledger; the next maintenance pass
-- drops its tables (pg/segments.h DropRetired).
SELECT pgq.drop_queue('turns');
SELECT count(*) AS maintained FROM pgq.maintain();
SELECT count(*) AS ring_tables FROM pg_class
 WHERE relnamespace = 'pgq'::regnamespace AND relname LIKE 'job_log\_' || :ring || '%';
RESET pgq.debug_clock_offset;
RESET pgq.ring_turn;
DROP EXTENSION pgq_cpp;
