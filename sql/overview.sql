-- pgq.queue_overview (issue 19): queue_stats' columns for dashboards, each
-- count exact up to exact_up_to and estimated from the planner's
-- statistics past it, for the queues the caller holds a right on.
CREATE EXTENSION pgq_cpp;

-- A small queue: every count exact, and the same as queue_stats.
SELECT pgq.create_queue('mail', max_running => 10);
SELECT pgq.create_queue('crm', group_concurrency => 1);
SELECT count(pgq.enqueue('mail', jsonb_build_object('n', i))) FROM generate_series(1, 6) i;
SELECT count(pgq.enqueue('mail', '{}', run_at => now() + interval '1 hour')) FROM generate_series(1, 2);
SELECT count(*) AS claimed FROM pgq.claim('mail', 3, lease => '1 hour');
SELECT pgq.complete(id, attempt) FROM pgq.jobs WHERE state = 'r' ORDER BY id LIMIT 1;
SELECT pgq.fail(id, attempt, 'boom', retry_in => NULL) IS NOT NULL AS failed
  FROM pgq.jobs WHERE state = 'r' ORDER BY id LIMIT 1;
SELECT pgq.cancel((SELECT max(id) FROM pgq.jobs WHERE state = 'p' AND run_at <= now())) AS dead;
SELECT pgq.enqueue('mail', '{}', after => ARRAY[(SELECT min(id) FROM pgq.jobs WHERE state = 'p')]) IS NOT NULL AS child;
SELECT count(pgq.enqueue('crm', '{}', group_key => 'a')) FROM generate_series(1, 3);
SELECT pgq.pause('crm');
SELECT queue, ready, scheduled, running, expired, dead, done_recent,
       oldest_ready_age IS NOT NULL AS has_age, paused, max_running, awaiting_parents, estimated
  FROM pgq.queue_overview() ORDER BY queue;
-- The same numbers as queue_stats.
SELECT o.queue
  FROM pgq.queue_overview() o JOIN pgq.queue_stats s USING (queue)
 WHERE (o.ready, o.scheduled, o.running, o.expired, o.dead, o.done_recent, o.paused,
        o.max_running, o.awaiting_parents)
       IS DISTINCT FROM
       (s.ready, s.scheduled, s.running, s.expired, s.dead, s.done_recent, s.paused,
        s.max_running, s.awaiting_parents);
-- An expired lease counts as expired (and running): the clock moved past
-- the hour's lease.
SET pgq.debug_clock_offset = '2h';
SELECT queue, running, expired FROM pgq.queue_overview() WHERE queue = 'mail';
RESET pgq.debug_clock_offset;

-- The oldest ready job is found in every priority level, not only the one
-- a claim takes next.
SELECT pgq.create_queue('levels');
SELECT pgq.enqueue('levels', '{}', run_at => now() - interval '2 hours', priority => -5) IS NOT NULL;
SELECT pgq.enqueue('levels', '{}', run_at => now() - interval '1 minute', priority => 5) IS NOT NULL;
SELECT pgq.enqueue('levels', '{}', run_at => now() + interval '1 day', priority => 9) IS NOT NULL;
SELECT ready, scheduled, oldest_ready_age >= interval '2 hours' AS two_hours, estimated
  FROM pgq.queue_overview() WHERE queue = 'levels';

-- Past exact_up_to: before any statistics, "more than" (exact_up_to + 1);
-- after ANALYZE, the estimate (here exact: ANALYZE read every row).
-- (Autovacuum off: its ANALYZE would bring the statistics early.)
ALTER TABLE pgq.job_rows SET (autovacuum_enabled = off);
ALTER TABLE pgq.dead_jobs_0 SET (autovacuum_enabled = off);
ALTER TABLE pgq.dead_jobs_1 SET (autovacuum_enabled = off);
ALTER TABLE pgq.dead_jobs_2 SET (autovacuum_enabled = off);
ALTER TABLE pgq.dead_jobs_3 SET (autovacuum_enabled = off);
-- (Priority 1: rows of pgq.job_rows, not entries of the queue's ring.)
SELECT pgq.create_queue('deep');
SELECT count(*) FROM pgq.enqueue_many('deep', ARRAY(SELECT jsonb_build_object('i', i) FROM generate_series(1, 40) i), priority => 1);
SELECT count(*) FROM pgq.enqueue_many('deep', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 10)), run_at => now() + interval '1 hour');
SELECT ready, scheduled, estimated FROM pgq.queue_overview(100) WHERE queue = 'deep';
SELECT ready + scheduled AS pending, estimated FROM pgq.queue_overview(20) WHERE queue = 'deep';
ANALYZE pgq.job_rows;
SELECT ready + scheduled AS pending, ready > 20 AS ready_estimated, estimated
  FROM pgq.queue_overview(20) WHERE queue = 'deep';
-- The small queues stay exact.
SELECT queue, estimated FROM pgq.queue_overview(20) WHERE queue <> 'deep' ORDER BY queue;
-- Dead jobs past the limit: estimated from dead_jobs' partitions.
SELECT count(*) FROM pgq.claim('deep', 30) c, LATERAL pgq.cancel(c.id) x;
SELECT dead, estimated FROM pgq.queue_overview(10) WHERE queue = 'deep';
ANALYZE pgq.dead_jobs;
SELECT dead, estimated FROM pgq.queue_overview(10) WHERE queue = 'deep';

-- A queue's ring is counted from its lane (its given-back entries, then its
-- claim cursor's on), as boundedly: exact up to the limit; past it the walk
-- stops and the rest is estimated from the ring's blocks left to read.
SELECT pgq.create_queue('deep_ring');
SELECT count(*) FROM pgq.enqueue_many('deep_ring', array_fill(jsonb_build_object('pad', repeat('x', 100)), ARRAY[3000]));
SELECT count(*) AS running FROM pgq.claim('deep_ring', 10);
SELECT ready, running, estimated FROM pgq.queue_overview(5000) WHERE queue = 'deep_ring';
SELECT pg_stat_force_next_flush();
SELECT format('job\_log\_%s\_%%', ring_id) AS segments FROM pgq.queues WHERE name = 'deep_ring' \gset
SELECT sum(heap_blks_hit + coalesce(heap_blks_read, 0)) AS blocks_read_before,
       sum(pg_relation_size(relid) / 8192) AS ring_blocks
  FROM pg_statio_user_tables WHERE relname LIKE :'segments' \gset
SELECT ready BETWEEN 2000 AND 4500 AS about_3000, running, estimated
  FROM pgq.queue_overview(100) WHERE queue = 'deep_ring';
SELECT pg_stat_force_next_flush();
SELECT sum(heap_blks_hit + coalesce(heap_blks_read, 0)) - :blocks_read_before < :ring_blocks / 4
         AS read_a_fraction_of_the_ring
  FROM pg_statio_user_tables WHERE relname LIKE :'segments';
-- pgq.running_jobs reads a ring's running jobs from the lease map (and
-- their entries), not the ring.
SELECT pg_stat_force_next_flush();
SELECT sum(heap_blks_hit + coalesce(heap_blks_read, 0)) AS blocks_read_before
  FROM pg_statio_user_tables WHERE relname LIKE :'segments' \gset
SELECT count(*) AS running, bool_and(attempt = 1 AND claimer_pid = pg_backend_pid()) AS claims
  FROM pgq.running_jobs WHERE queue = 'deep_ring';
SELECT pg_stat_force_next_flush();
SELECT sum(heap_blks_hit + coalesce(heap_blks_read, 0)) - :blocks_read_before < :ring_blocks / 4
         AS running_jobs_read_a_fraction_of_the_ring
  FROM pg_statio_user_tables WHERE relname LIKE :'segments';
-- pgq.job, a cancel or a child naming a parent, of an id found nowhere,
-- read the rings of the caller's queues only: another team's lookups read
-- no block of this ring; nor does its pgq.queue_stats (each queue's ring
-- read for the queues shown only: it read every ring).
CREATE ROLE overview_other;
SELECT pgq.grant('overview_other', 'mail', 'consume');
SELECT pgq.grant('overview_other', 'mail', 'produce');
SELECT pg_stat_force_next_flush();
SELECT sum(heap_blks_hit + coalesce(heap_blks_read, 0)) AS blocks_read_before
  FROM pg_statio_user_tables WHERE relname LIKE :'segments' \gset
SET ROLE overview_other;
SELECT count(*) AS found FROM pgq.job(-1);
SELECT pgq.cancel(-1) AS cancelled;
SELECT pgq.enqueue('mail', '{}', after => ARRAY[-1]::bigint[]);
SELECT queue, ready FROM pgq.queue_stats;
RESET ROLE;
SELECT pg_stat_force_next_flush();
SELECT sum(heap_blks_hit + coalesce(heap_blks_read, 0)) - :blocks_read_before AS blocks_read
  FROM pg_statio_user_tables WHERE relname LIKE :'segments';
SELECT pgq.revoke('overview_other', 'mail', 'consume');
SELECT pgq.revoke('overview_other', 'mail', 'produce');
DROP ROLE overview_other;
-- Given back by a rolled-back claim, counted again.
BEGIN;
SELECT count(*) AS claimed FROM pgq.claim('deep_ring', 5);
ROLLBACK;
SELECT ready, running, estimated FROM pgq.queue_overview(5000) WHERE queue = 'deep_ring';

-- Rights: the queues the caller holds some right on, and no other.
CREATE ROLE overview_viewer;
SELECT pgq.grant('overview_viewer', 'crm', 'consume');
SET ROLE overview_viewer;
SELECT queue, ready FROM pgq.queue_overview();
RESET ROLE;
CREATE ROLE overview_nobody;
SET ROLE overview_nobody;
SELECT count(*) AS nothing FROM pgq.queue_overview();
RESET ROLE;

-- Bad input.
SELECT * FROM pgq.queue_overview(0);
SELECT * FROM pgq.queue_overview(1000001);
SELECT * FROM pgq.queue_overview(NULL);

SELECT pgq.revoke('overview_viewer', 'crm', 'consume');
DROP ROLE overview_viewer;
DROP ROLE overview_nobody;
DROP EXTENSION pgq_cpp;
