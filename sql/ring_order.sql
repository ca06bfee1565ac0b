-- Claim order on a ring queue (issue 33, ADR 0028): the ring's entries
-- (priority 0, in the order they were enqueued) and the jobs of the queue
-- that wait in pgq.job_rows (a dedupe key in a queue that replaces
-- holders, a priority, a later run_at; a grouped job only while its group
-- has no room: g1's has, so it is an entry, ring_groups.sql) are handed out
-- merged in SPEC order: priority, then run_at, then id. A
-- claim of n takes them in that order across both; so does a run of
-- claims of one.
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('ro', lease => '1 hour');
SELECT pgq.create_queue('ro1', lease => '1 hour');
CREATE TEMP TABLE enq (k text PRIMARY KEY, id bigint NOT NULL UNIQUE);
CREATE FUNCTION pg_temp.job(bigint) RETURNS text LANGUAGE sql AS 'SELECT k FROM enq WHERE id = $1';

-- For each queue: a job of priority -1 first, then ring entries (one of
-- them grouped) and a job of pgq.job_rows (deduplicated with
-- on_duplicate => 'replace': ring_dedupe.sql), then one of priority 2.
CREATE FUNCTION pg_temp.fill(q text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO enq VALUES (q || ':low', pgq.enqueue(q, '{}', priority => -1));
  INSERT INTO enq VALUES (q || ':r1', pgq.enqueue(q, '{}'));
  INSERT INTO enq VALUES (q || ':g1', pgq.enqueue(q, '{}', group_key => 'g'));
  INSERT INTO enq VALUES (q || ':r2', pgq.enqueue(q, '{}'));
  INSERT INTO enq VALUES (q || ':d1', pgq.enqueue(q, '{}', dedupe_key => 'd', on_duplicate => 'replace'));
  INSERT INTO enq VALUES (q || ':r3', pgq.enqueue(q, '{}'));
  INSERT INTO enq SELECT q || ':r' || (3 + o), id
    FROM pgq.enqueue_many(q, ARRAY['{}', '{}']::jsonb[]) WITH ORDINALITY AS e(id, o);
  INSERT INTO enq VALUES (q || ':high', pgq.enqueue(q, '{}', priority => 2));
END $$;
SELECT pg_temp.fill('ro'), pg_temp.fill('ro1');
-- Where each job is.
SELECT e.k, CASE WHEN j.id IS NOT NULL THEN 'job_rows' ELSE 'ring' END AS kept
  FROM enq e LEFT JOIN pgq.job_rows j USING (id) WHERE e.k LIKE 'ro:%' ORDER BY e.id;

-- One claim of ten: every job, in claim order.
SELECT pg_temp.job(id) AS job, priority FROM pgq.claim('ro', 10);

-- A run of claims of one: the same order.
CREATE TEMP TABLE one_by_one (n serial, job text);
DO $$
BEGIN
  FOR i IN 1 .. 10 LOOP
    INSERT INTO one_by_one (job) SELECT pg_temp.job(id) FROM pgq.claim('ro1', 1);
  END LOOP;
END $$;
SELECT n, job FROM one_by_one ORDER BY n;

-- A job that becomes due later takes its place by its run_at: it comes
-- after the ring's entries whose run_at is earlier, before those whose
-- run_at is later (r3's: pgq.clock(), moved on two minutes; a default
-- run_at is the transaction's start, as for any job).
SELECT pgq.create_queue('ro2', lease => '1 hour');
INSERT INTO enq VALUES ('ro2:r1', pgq.enqueue('ro2', '{}'));
INSERT INTO enq VALUES ('ro2:later', pgq.enqueue('ro2', '{}', run_at => pgq.clock() + interval '1 minute'));
INSERT INTO enq VALUES ('ro2:r2', pgq.enqueue('ro2', '{}'));
SET pgq.debug_clock_offset = '2min';
INSERT INTO enq VALUES ('ro2:r3', pgq.enqueue('ro2', '{}', run_at => pgq.clock()));
SELECT count(*) AS on_the_ring FROM pgq.ring_jobs WHERE id = (SELECT id FROM enq WHERE k = 'ro2:r3');
SELECT pg_temp.job(id) AS job FROM pgq.claim('ro2', 10);
RESET pgq.debug_clock_offset;

-- A claim across queues takes the next n jobs of them all in claim order,
-- counting the rings' next entries beside their tables' jobs.
SELECT pgq.create_queue('qa', lease => '1 hour'), pgq.create_queue('qb', lease => '1 hour');
DO $$
BEGIN
  INSERT INTO enq VALUES ('qa:1', pgq.enqueue('qa', '{}'));
  INSERT INTO enq VALUES ('qb:1', pgq.enqueue('qb', '{}'));
  INSERT INTO enq VALUES ('qb:2', pgq.enqueue('qb', '{}', group_key => 'g'));
  INSERT INTO enq VALUES ('qa:2', pgq.enqueue('qa', '{}'));
  INSERT INTO enq VALUES ('qa:3', pgq.enqueue('qa', '{}'));
  INSERT INTO enq VALUES ('qb:3', pgq.enqueue('qb', '{}'));
END $$;
SELECT pg_temp.job(id) AS job FROM pgq.claim(ARRAY['qa', 'qb'], 3) ORDER BY id;
SELECT pg_temp.job(id) AS job FROM pgq.claim(ARRAY['qb', 'qa'], 2) ORDER BY id;
SELECT pg_temp.job(id) AS job FROM pgq.claim(ARRAY['qa', 'qb'], 5) ORDER BY id;

DROP EXTENSION pgq_cpp;
