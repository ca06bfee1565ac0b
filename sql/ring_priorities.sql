-- Priorities on rings (issue 33, ADR 0028 "Priorities: a ring per priority
-- served"): a queue serves up to four priorities on rings, 0 on the ring
-- create_queue made and each other one on a ring of its own, which the
-- maintenance gives once an enqueue of that priority asked for it. Until
-- then, and for a fifth priority, the jobs wait in pgq.job_rows. A claim
-- merges the rings and the table in SPEC order (priority, run_at, id).
-- A priority ring asked for by a queue of an earlier install (the extension
-- dropped before the maintenance took the wish) is not given to the queue
-- that takes its id after CREATE EXTENSION again: 'pr' gets none for -7.
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('gone');
SELECT pgq.enqueue('gone', '{}', priority => -7) > 0 AS asked_for_a_ring;
DROP EXTENSION pgq_cpp;
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('pr', lease => '1 hour');
SELECT count(*) AS maintained FROM pgq.maintain();
SELECT count(*) AS rings_for_minus_7 FROM pgq.queue_rings WHERE priority = -7;
CREATE TEMP TABLE enq (k text PRIMARY KEY, id bigint NOT NULL UNIQUE);
CREATE FUNCTION pg_temp.job(bigint) RETURNS text LANGUAGE sql AS 'SELECT k FROM enq WHERE id = $1';
-- Where a job is kept: a row, or the ring of which priority.
CREATE FUNCTION pg_temp.kept(bigint) RETURNS text LANGUAGE sql AS $$
  SELECT COALESCE((SELECT 'job_rows' FROM pgq.job_rows WHERE id = $1),
                  (SELECT 'ring ' || qr.priority FROM pgq.ring_jobs r
                     JOIN pgq.queue_rings qr ON qr.ring_id = r.ring WHERE r.id = $1),
                  'nowhere') $$;

-- A priority without a ring: its jobs are rows, and the enqueue asks for a
-- ring, which the maintenance gives (one asked priority a queue a pass).
INSERT INTO enq VALUES ('p5:row', pgq.enqueue('pr', '{}', priority => 5));
SELECT pg_temp.kept(id) FROM enq WHERE k = 'p5:row';
SELECT count(*) AS maintained FROM pgq.maintain();
SELECT priority FROM pgq.queue_rings WHERE queue_id = (SELECT queue_id FROM pgq.queues WHERE name = 'pr')
 ORDER BY priority DESC;
INSERT INTO enq VALUES ('p5:ring', pgq.enqueue('pr', '{}', priority => 5));
INSERT INTO enq VALUES ('m2:row', pgq.enqueue('pr', '{}', priority => -2));
SELECT count(*) AS maintained FROM pgq.maintain();
INSERT INTO enq VALUES ('p9:row', pgq.enqueue('pr', '{}', priority => 9));
SELECT count(*) AS maintained FROM pgq.maintain();
-- Four priorities served: a fifth's jobs stay rows (no ring is made for it).
INSERT INTO enq VALUES ('p1:row', pgq.enqueue('pr', '{}', priority => 1));
SELECT count(*) AS maintained FROM pgq.maintain();
SELECT priority FROM pgq.queue_rings WHERE queue_id = (SELECT queue_id FROM pgq.queues WHERE name = 'pr')
 ORDER BY priority DESC;
SELECT count(*) AS made FROM pg_class
 WHERE relnamespace = 'pgq'::regnamespace
   AND relname IN (SELECT 'job_log_' || ring_id FROM pgq.priority_rings);

-- The rest of the queue's jobs, enqueue and enqueue_many, each where its
-- priority is served (a grouped one too: its group has room).
DO $$
BEGIN
  INSERT INTO enq VALUES ('p0:a', pgq.enqueue('pr', '{}'));
  INSERT INTO enq VALUES ('p9:ring', pgq.enqueue('pr', '{}', priority => 9));
  INSERT INTO enq VALUES ('m2:ring', pgq.enqueue('pr', '{}', priority => -2));
  INSERT INTO enq SELECT 'p5:many' || o, id
    FROM pgq.enqueue_many('pr', ARRAY['{}', '{}']::jsonb[], priority => 5) WITH ORDINALITY AS e(id, o);
  INSERT INTO enq VALUES ('p5:group', pgq.enqueue('pr', '{}', priority => 5, group_key => 'g'));
  INSERT INTO enq VALUES ('p0:b', pgq.enqueue('pr', '{}'));
  INSERT INTO enq VALUES ('p1:b', pgq.enqueue('pr', '{}', priority => 1));
END $$;
SELECT k, pg_temp.kept(id) FROM enq ORDER BY id;

-- What the readers show: every job once, with its priority.
SELECT count(*) AS shown, count(DISTINCT id) AS distinct_ids FROM pgq.jobs
 WHERE queue_id = (SELECT queue_id FROM pgq.queues WHERE name = 'pr');
SELECT pg_temp.job(j.id) AS job, j.priority, j.state
  FROM pgq.jobs j WHERE j.id IN (SELECT id FROM enq WHERE k LIKE '%ring' OR k LIKE 'p5:many%')
 ORDER BY j.id;
SELECT state, priority FROM pgq.job((SELECT id FROM enq WHERE k = 'm2:ring'));
SELECT count(*) AS listed FROM pgq.list_jobs('pr', max => 100);
SELECT queue, ready FROM pgq.queue_stats WHERE queue = 'pr';
SELECT queue, ready, estimated FROM pgq.queue_overview() WHERE queue = 'pr';

-- Claims of one: SPEC order across the rings and the table.
BEGIN;
CREATE TEMP TABLE one_by_one (n serial, job text, priority int);
DO $$
BEGIN
  FOR i IN 1 .. 14 LOOP
    INSERT INTO one_by_one (job, priority) SELECT pg_temp.job(id), priority FROM pgq.claim('pr', 1);
  END LOOP;
END $$;
SELECT n, job, priority FROM one_by_one ORDER BY n;
ROLLBACK;
-- One claim of 14 after the rollback (the rings' entries given back):
-- the same order.
SELECT pg_temp.job(id) AS job, priority FROM pgq.claim('pr', 14);

-- complete_many of jobs of several rings and the table: each once.
SELECT pgq.complete_many(array_agg(id), array_agg(attempt)) AS completed
  FROM pgq.jobs WHERE state = 'r' AND priority IN (9, 0, -2);
SELECT pg_temp.job(id) AS left_running, priority FROM pgq.jobs WHERE state = 'r' ORDER BY id;
-- A failure of a ring job of priority 5: its retry keeps the priority.
SELECT pgq.fail(id, attempt, 'boom', retry_in => '0') AS failed
  FROM pgq.jobs WHERE id = (SELECT id FROM enq WHERE k = 'p5:ring');
SELECT pg_temp.kept(id), j.priority, j.attempt FROM pgq.jobs j WHERE id = (SELECT id FROM enq WHERE k = 'p5:ring');

-- A cap counts the running jobs of every ring.
SELECT pgq.alter_queue('pr', max_running => 7);
SELECT count(*) AS running FROM pgq.jobs
 WHERE state = 'r' AND queue_id = (SELECT queue_id FROM pgq.queues WHERE name = 'pr');
INSERT INTO enq VALUES ('p9:c', pgq.enqueue('pr', '{}', priority => 9));
INSERT INTO enq VALUES ('m2:c', pgq.enqueue('pr', '{}', priority => -2));
SELECT pg_temp.job(id) AS capped_claim FROM pgq.claim('pr', 5);
SELECT count(*) AS at_cap FROM pgq.claim('pr', 5);

-- A cancel of a pending job of a priority's ring: a tombstone on that ring.
SELECT pgq.alter_queue('pr', max_running => NULL);
SELECT pgq.cancel((SELECT id FROM enq WHERE k = 'm2:c')) AS cancelled;
SELECT state, dead_reason FROM pgq.job((SELECT id FROM enq WHERE k = 'm2:c'));
SELECT count(*) AS claimed_after_cancel FROM pgq.claim('pr', 10) c WHERE c.id = (SELECT id FROM enq WHERE k = 'm2:c');

-- A claim across queues counts the priority rings' next entries in the
-- spread: the higher priority first, whichever queue.
SELECT pgq.create_queue('pr2', lease => '1 hour');
SELECT pgq.complete_many(array_agg(id), array_agg(attempt)) >= 0 AS cleared FROM pgq.jobs WHERE state = 'r';
INSERT INTO enq VALUES ('pr2:0', pgq.enqueue('pr2', '{}'));
INSERT INTO enq VALUES ('pr:9', pgq.enqueue('pr', '{}', priority => 9));
INSERT INTO enq VALUES ('pr:m2', pgq.enqueue('pr', '{}', priority => -2));
SELECT pg_temp.job(id) AS job, queue FROM pgq.claim(ARRAY['pr2', 'pr'], 2);

-- A priority gets a ring only while the database has fewer rings than its
-- share of lanes, so that every ring could hold a lane at once: 'pr' has
-- four and 'pr2' one; with a share of six, 'pr3' makes the sixth, and its
-- priority 7 stays rows. With the share back, its next enqueue asks again.
SET pgq.max_ring_queues_per_database = 6;
SELECT pgq.create_queue('pr3');
SELECT count(*) AS rings FROM pgq.queue_rings;
INSERT INTO enq VALUES ('pr3:7a', pgq.enqueue('pr3', '{}', priority => 7));
SELECT count(*) AS maintained FROM pgq.maintain();
SELECT count(*) AS pr3_rings FROM pgq.queue_rings WHERE queue_id = (SELECT queue_id FROM pgq.queues WHERE name = 'pr3');
RESET pgq.max_ring_queues_per_database;
INSERT INTO enq VALUES ('pr3:7b', pgq.enqueue('pr3', '{}', priority => 7));
SELECT count(*) AS maintained FROM pgq.maintain();
SELECT count(*) AS pr3_rings FROM pgq.queue_rings WHERE queue_id = (SELECT queue_id FROM pgq.queues WHERE name = 'pr3');
INSERT INTO enq VALUES ('pr3:7c', pgq.enqueue('pr3', '{}', priority => 7));
SELECT k, pg_temp.kept(id) FROM enq WHERE k LIKE 'pr3:%' ORDER BY id;
SELECT pg_temp.job(id) AS job FROM pgq.claim('pr3', 3);

-- drop_queue drops every ring of the queue (their tables at the next pass).
SELECT pgq.drop_queue('pr', force => true);
SELECT count(*) AS priority_rings_left FROM pgq.priority_rings
 WHERE queue_id NOT IN (SELECT queue_id FROM pgq.queues);
SELECT count(*) AS rings_listed FROM pgq.rings_dropped;
SELECT count(*) AS maintained FROM pgq.maintain();
SELECT count(*) AS ring_tables_left FROM pg_class
 WHERE relname LIKE 'job\_log\_%' AND relnamespace = 'pgq'::regnamespace
   AND relname NOT IN (SELECT 'job_log_' || ring_id FROM pgq.queue_rings)
   AND relname NOT LIKE ALL (SELECT 'job_log_' || ring_id || '_%' FROM pgq.queue_rings);

DROP EXTENSION pgq_cpp;
