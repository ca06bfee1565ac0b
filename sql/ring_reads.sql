-- The read surfaces on ring queues (issue 33 step 2e, docs/adr/0028-queues-on-rings.md):
-- pgq.job, list_jobs, queue_stats, running_jobs, queue_workers,
-- queue_overview, queue_metrics and metrics show a ring queue's jobs as
-- they show the same jobs of a queue without a ring (pgq.job_rows): pending as
-- ready, running with the claim's attempt and lease, a completed job gone
-- (or done where the queue keeps history), a job moved into pgq.job_rows (a
-- failure) once, from there; the same rights. Every step is done on a
-- ring queue and on a table queue alike, and the two are compared. A table
-- queue is a queue without a ring, as a queue of 2.x is after the update
-- until the maintenance gives it one (this cluster runs no maintenance
-- worker); made here by taking the ring away (a superuser's UPDATE, then
-- an alter_queue so that cached queues learn it).
CREATE EXTENSION pgq_cpp;

SELECT pgq.create_queue('ring', max_attempts => 3, lease => '5 minutes', backoff_base => '1 hour');
SELECT pgq.create_queue('ring_kept', keep_completed => '1 hour');
SELECT pgq.create_queue('table', max_attempts => 3, lease => '5 minutes', backoff_base => '1 hour');
SELECT pgq.create_queue('table_kept', keep_completed => '1 hour');
UPDATE pgq.queues SET ring_id = NULL WHERE name LIKE 'table%';
SELECT pgq.alter_queue('table', max_attempts => 3);
SELECT name, ring_id IS NOT NULL AS on_a_ring FROM pgq.queues ORDER BY name;

-- Each job by name, on both kinds of queue: j<n>_<queue>.
CREATE TEMP TABLE enq (k text PRIMARY KEY, q text NOT NULL, id bigint NOT NULL UNIQUE);
CREATE FUNCTION pg_temp.job(bigint) RETURNS text LANGUAGE sql AS 'SELECT k FROM enq WHERE id = $1';
GRANT SELECT ON enq TO PUBLIC;
-- Six plain jobs each: two stay pending, one runs, one completes, one
-- fails (a retry: moved into pgq.job_rows on the ring queue), one more runs
-- with an extended lease.
INSERT INTO enq SELECT 'j' || o || '_' || q, q, id
  FROM unnest(ARRAY['ring', 'table']) AS q,
       LATERAL pgq.enqueue_many(q, ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}', '{"n": 4}',
                                         '{"n": 5}', '{"n": 6}']::jsonb[]) WITH ORDINALITY AS e(id, o);
-- Nothing is in pgq.job_rows of the ring queue yet: its jobs are on its ring.
SELECT q.name, count(*) AS rows_in_pgq_jobs FROM pgq.job_rows j JOIN pgq.queues q USING (queue_id)
 GROUP BY q.name ORDER BY q.name;

-- Claims, each committed (autocommit): four jobs of each queue.
SELECT pg_temp.job(id) AS job, attempt FROM pgq.claim('ring', 4) ORDER BY id;
SELECT pg_temp.job(id) AS job, attempt FROM pgq.claim('table', 4) ORDER BY id;
SELECT k, pgq.complete(id, 1) AS completed FROM enq WHERE k IN ('j3_ring', 'j3_table') ORDER BY k;
SELECT k, pgq.fail(id, 1, 'smtp timeout') FROM enq WHERE k IN ('j4_ring', 'j4_table') ORDER BY k;
SELECT k, pgq.extend(id, 1, '1 hour') - pgq.clock() > '59 minutes' AS extended
  FROM enq WHERE k IN ('j2_ring', 'j2_table') ORDER BY k;
-- The ring queue's failed job is in pgq.job_rows now, the others on the ring.
SELECT pg_temp.job(j.id) AS job, j.state FROM pgq.job_rows j JOIN pgq.queues q USING (queue_id)
 WHERE q.name = 'ring';

-- The view pgq.jobs (every unfinished job, with 2.x's columns) shows the
-- ring queue's jobs as the table queue's rows: the same state, attempt,
-- lease and payload of each (the failed one from pgq.job_rows, once).
SELECT split_part(e.k, '_', 1) AS job,
       r.state AS ring_state, t.state AS table_state, r.attempt = t.attempt AS same_attempt,
       r.max_attempts = t.max_attempts AND r.priority = t.priority AND r.payload = t.payload
         AND (r.lease_until IS NULL) = (t.lease_until IS NULL)
         AND (r.claimed_at IS NULL) = (t.claimed_at IS NULL) AS same_columns
  FROM enq e JOIN pgq.jobs r ON r.id = e.id
  FULL JOIN (enq f JOIN pgq.jobs t ON t.id = f.id AND f.q = 'table')
    ON split_part(f.k, '_', 1) = split_part(e.k, '_', 1)
 WHERE e.q = 'ring'
 ORDER BY 1;
SELECT count(*) AS rows_shown, count(DISTINCT id) AS jobs FROM pgq.jobs;

-- pgq.job of each: state, attempt, lease, claim time, payload.
SELECT e.k, i.state, i.attempt, i.max_attempts, i.priority, i.queue,
       i.claimed_at IS NOT NULL AS claimed, i.lease_until - pgq.clock() > '59 minutes' AS long_lease,
       i.lease_until - pgq.clock() BETWEEN '4 minutes' AND '5 minutes' AS queue_lease,
       i.run_at <= pgq.clock() AS due, i.enqueued_at <= pgq.clock() AS enqueued, i.last_error,
       i.payload, i.open_parents, i.dead_reason
  FROM enq e LEFT JOIN LATERAL pgq.job(e.id) i ON true
 ORDER BY e.q, e.k;
-- Every column alike, but for the id, the queue and the times.
CREATE FUNCTION pg_temp.shown(queue text) RETURNS TABLE (
    k text, state text, attempt int, max_attempts int, priority int, group_key text,
    dedupe_key text, claimed boolean, leased boolean, finished boolean, progress jsonb,
    result jsonb, last_error text, open_parents int, payload jsonb, dead_reason text)
LANGUAGE sql AS $$
  SELECT split_part(e.k, '_', 1), i.state, i.attempt, i.max_attempts, i.priority, i.group_key,
         i.dedupe_key, i.claimed_at IS NOT NULL, i.lease_until IS NOT NULL,
         i.finished_at IS NOT NULL, i.progress, i.result, i.last_error, i.open_parents,
         i.payload, i.dead_reason
    FROM enq e CROSS JOIN LATERAL pgq.job(e.id) i WHERE e.q = queue
$$;
SELECT count(*) AS jobs_differing FROM (
  (SELECT * FROM pg_temp.shown('ring') EXCEPT ALL SELECT * FROM pg_temp.shown('table'))
  UNION ALL
  (SELECT * FROM pg_temp.shown('table') EXCEPT ALL SELECT * FROM pg_temp.shown('ring'))) d;
-- claimed_at is the claim's time, kept by an extension, as in pgq.job_rows.
SELECT count(*) AS claimed_at_differs FROM enq r JOIN enq t ON t.k = replace(r.k, 'ring', 'table')
 WHERE r.q = 'ring' AND r.k IN ('j1_ring', 'j2_ring')
   AND (SELECT claimed_at FROM pgq.job(r.id)) - (SELECT claimed_at FROM pgq.job(t.id))
       NOT BETWEEN '-1 second' AND '1 second';

-- list_jobs: newest first, by state, paginated.
SELECT pg_temp.job(id) AS job, state, attempt, payload FROM pgq.list_jobs('ring');
SELECT pg_temp.job(id) AS job, state, attempt, payload FROM pgq.list_jobs('table');
SELECT pg_temp.job(id) AS job, state FROM pgq.list_jobs('ring', 'running');
SELECT pg_temp.job(id) AS job, state FROM pgq.list_jobs('ring', 'ready');
SELECT pg_temp.job(id) AS job, state FROM pgq.list_jobs('ring', 'scheduled');
SELECT count(*) AS done_or_dead FROM pgq.list_jobs('ring', 'done');
SELECT pg_temp.job(id) AS job FROM pgq.list_jobs('ring', max => 2);
SELECT pg_temp.job(id) AS job
  FROM pgq.list_jobs('ring', max => 2, before_id => (SELECT id FROM enq WHERE k = 'j5_ring'));
SELECT count(*) AS list_differs FROM (
  (SELECT split_part(pg_temp.job(id), '_', 1), state, attempt, payload FROM pgq.list_jobs('ring')
   EXCEPT ALL
   SELECT split_part(pg_temp.job(id), '_', 1), state, attempt, payload FROM pgq.list_jobs('table'))
  UNION ALL
  (SELECT split_part(pg_temp.job(id), '_', 1), state, attempt, payload FROM pgq.list_jobs('table')
   EXCEPT ALL
   SELECT split_part(pg_temp.job(id), '_', 1), state, attempt, payload FROM pgq.list_jobs('ring'))) d;

-- The counts: queue_stats, queue_overview, queue_metrics, metrics. The
-- failed jobs wait out their backoff (scheduled, an hour at least).
SELECT queue, ready, scheduled, running, expired, dead, done_recent,
       oldest_ready_age >= '0' AS has_oldest, awaiting_parents
  FROM pgq.queue_stats WHERE queue IN ('ring', 'table') ORDER BY queue;
SELECT queue, ready, scheduled, running, expired, dead, done_recent,
       oldest_ready_age >= '0' AS has_oldest, awaiting_parents, estimated
  FROM pgq.queue_overview() WHERE queue IN ('ring', 'table') ORDER BY queue;
SELECT queue, ready, scheduled, running, expired, dead, oldest_ready_seconds >= 0 AS has_oldest,
       awaiting_parents, estimated
  FROM pgq.queue_metrics() WHERE queue IN ('ring', 'table') ORDER BY queue;
SELECT regexp_replace(line, 'queue="(ring|table)"', 'queue="*"') AS line, count(*) AS queues
  FROM unnest(string_to_array(pgq.metrics(), E'\n')) AS line
 WHERE line ~ '^pgq_jobs\{' AND line ~ 'queue="(ring|table)"'
 GROUP BY 1 ORDER BY 1;
-- running_jobs: the running ones, with their lease and claimer (a ring
-- job's from its claim's receipt: this session).
SELECT pg_temp.job(id) AS job, queue, attempt, max_attempts, running_for >= '0' AS running_for,
       lease_left > '0' AS leased, expired, claimer_pid = pg_backend_pid() AS claimed_here,
       claimer_connected
  FROM pgq.running_jobs ORDER BY queue, id;

-- queue_workers: a queue's running jobs in one row a claimer (this
-- session), the ring's as the table's.
SELECT queue_name, claimer_pid = pg_backend_pid() AS claimed_here, claimer_connected, running,
       oldest_claimed_at <= newest_claimed_at AS claimed, expired
  FROM pgq.queue_workers() WHERE queue_name IN ('ring', 'table') ORDER BY queue_name;
SELECT queue_name, running FROM pgq.queue_workers('ring');
SELECT queue_name, running FROM pgq.queue_workers('table');

-- Leases that ran out: expired in every count until maintenance moves
-- them (the ring's into pgq.job_rows), then pending again with the attempt
-- spent.
SET pgq.debug_clock_offset = '10min';
SELECT queue, ready, scheduled, running, expired FROM pgq.queue_stats
 WHERE queue IN ('ring', 'table') ORDER BY queue;
SELECT queue, ready, scheduled, running, expired FROM pgq.queue_overview()
 WHERE queue IN ('ring', 'table') ORDER BY queue;
SELECT pg_temp.job(id) AS job, expired FROM pgq.running_jobs ORDER BY queue, id;
SELECT queue_name, running, expired FROM pgq.queue_workers()
 WHERE queue_name IN ('ring', 'table') ORDER BY queue_name;
SELECT count(*) AS maintained FROM pgq.maintain();
SELECT k, (SELECT state || ' ' || attempt FROM pgq.job(id)) AS job FROM enq
 WHERE k IN ('j1_ring', 'j1_table') ORDER BY k;
SELECT queue, ready, scheduled, running, expired FROM pgq.queue_stats
 WHERE queue IN ('ring', 'table') ORDER BY queue;
RESET pgq.debug_clock_offset;

-- A role without a right on the queues sees none of their jobs; one with
-- admin sees them without payload.
CREATE ROLE pgq_regress_reads_nobody;
CREATE ROLE pgq_regress_reads_admin;
CREATE ROLE pgq_regress_reads_other;
SELECT pgq.create_queue('other');
SELECT pgq.grant('pgq_regress_reads_nobody', 'other', 'consume');
SELECT pgq.grant('pgq_regress_reads_admin', 'ring', 'admin');
SET ROLE pgq_regress_reads_nobody;
SELECT count(*) AS jobs_seen FROM enq CROSS JOIN LATERAL pgq.job(enq.id);
SELECT pgq.list_jobs('ring');
SELECT queue FROM pgq.queue_stats;
SELECT queue FROM pgq.queue_overview();
SELECT count(*) AS running_seen FROM pgq.running_jobs;
RESET ROLE;
SET ROLE pgq_regress_reads_admin;
SELECT pg_temp.job(id) AS job, state, payload FROM pgq.list_jobs('ring');
SELECT pg_temp.job(id) AS job, state, payload FROM pgq.job((SELECT id FROM enq WHERE k = 'j5_ring'));
SELECT count(*) AS table_jobs_seen
  FROM enq CROSS JOIN LATERAL pgq.job(enq.id) WHERE enq.q = 'table';
SELECT queue, ready, running FROM pgq.queue_stats;
SELECT queue, ready, running FROM pgq.queue_overview();
RESET ROLE;
-- pgq.ring_jobs is the readers' own: nobody else reads it.
SET ROLE pgq_regress_reads_nobody;
SELECT count(*) FROM pgq.ring_jobs;
SELECT count(*) FROM pgq.job_log;
RESET ROLE;
DROP ROLE pgq_regress_reads_nobody;
DROP ROLE pgq_regress_reads_admin;
DROP ROLE pgq_regress_reads_other;

-- A queue that keeps history: a completed ring job is done, with its
-- result, as a completed table job.
INSERT INTO enq SELECT 'k1_' || q, q, pgq.enqueue(q, '{"n": "kept"}')
  FROM unnest(ARRAY['ring_kept', 'table_kept']) AS q;
SELECT pg_temp.job(id) AS job, attempt FROM pgq.claim('ring_kept');
SELECT pg_temp.job(id) AS job, attempt FROM pgq.claim('table_kept');
SELECT k, pgq.complete(id, 1) AS completed FROM enq WHERE k LIKE 'k1_%' ORDER BY k;
SELECT e.k, i.state, i.attempt, i.finished_at IS NOT NULL AS finished, i.payload
  FROM enq e CROSS JOIN LATERAL pgq.job(e.id) i WHERE e.k LIKE 'k1_%' ORDER BY e.k;
SELECT queue, ready, running, done_recent FROM pgq.queue_stats
 WHERE queue IN ('ring_kept', 'table_kept') ORDER BY queue;
SELECT pg_temp.job(id) AS job, state FROM pgq.list_jobs('ring_kept');

-- Completed on its ring, with a result and by complete_many: each history
-- row is written from the ring's entry and lease, with the columns the
-- table queue's rows give, and pgq.job_rows takes no row (before, a ring
-- job of a queue keeping history was moved there to be completed).
INSERT INTO enq SELECT k || '_' || q, q, pgq.enqueue(q, jsonb_build_object('n', k))
  FROM unnest(ARRAY['k2', 'k3', 'k4']) AS k, unnest(ARRAY['ring_kept', 'table_kept']) AS q;
BEGIN;
SELECT count(*) AS claimed FROM pgq.claim('ring_kept', 3);
SELECT count(*) AS claimed FROM pgq.claim('table_kept', 3);
SELECT k, pgq.complete(id, 1, jsonb_build_object('sent', k)) AS completed
  FROM enq WHERE k LIKE 'k2_%' ORDER BY k;
SELECT pgq.complete_many(array_agg(id ORDER BY k), array_agg(1 ORDER BY k)) AS completed_many
  FROM enq WHERE k ~ '^k[34]_';
COMMIT;
-- Their closures say done ('d'), none moved into pgq.job_rows ('m').
SELECT l.outcome, count(*) AS closures FROM pgq.job_log l JOIN pgq.queues q ON q.ring_id = l.ring
 WHERE q.name = 'ring_kept' AND l.kind = 'c' GROUP BY l.outcome ORDER BY 1;
SELECT e.k, i.state, i.attempt, i.max_attempts, i.priority, i.run_at <= i.claimed_at AS run_before_claim,
       i.enqueued_at <= i.claimed_at AS enqueued_before_claim,
       i.claimed_at <= i.finished_at AS claimed_before_finish, i.result, i.payload
  FROM enq e CROSS JOIN LATERAL pgq.job(e.id) i WHERE e.k ~ '^k[234]_' ORDER BY e.k;
SELECT count(*) AS completed_twice FROM enq WHERE k ~ '^k[234]_ring' AND pgq.complete(id, 1);

-- A ring job's failure: a closure 'f' on the ring, and its next attempt a
-- pending row of pgq.job_rows (where jobs wait for a later run_at) with the
-- error and the failed claim's time, or, its attempts spent, its
-- dead-letter row; it is never moved into pgq.job_rows running first (a
-- closure 'm', a row inserted and then updated or deleted). Its next
-- attempt's claim takes the row back onto the ring, already handed out
-- (an entry 'a' with its error and its claim's number, which its closure
-- carries), so its failure is
-- a closure there too.
SELECT pgq.create_queue('ring_fail', max_attempts => 2);
SELECT pgq.enqueue('ring_fail', '{"n": "f1"}') AS fail_id \gset
SELECT attempt FROM pgq.claim('ring_fail');
SELECT pgq.fail(:fail_id, 1, 'boom 1', retry_in => '0 seconds') AS outcome;
SELECT state, attempt, last_error, claimed_at IS NOT NULL AS claim_time_kept, payload
  FROM pgq.job_rows WHERE id = :fail_id;
SELECT attempt FROM pgq.claim('ring_fail');
SELECT state, attempt, last_error FROM pgq.job(:fail_id);
SELECT count(*) AS rows_of_it FROM pgq.job_rows WHERE id = :fail_id;
SELECT pgq.fail(:fail_id, 2, 'boom 2') AS outcome;
SELECT state, attempt, last_error, dead_reason FROM pgq.job(:fail_id);
SELECT pgq.fail(:fail_id, 2, 'late') AS outcome_of_a_late_failure;
SELECT l.kind, l.attempt, l.outcome, l.last_error, l.entry IS NOT NULL AS claim_numbered
  FROM pgq.job_log l WHERE l.id = :fail_id ORDER BY l.kind DESC, l.attempt, l.entry IS NOT NULL;
-- A job of one attempt dies from its ring: its dead-letter row at once.
SELECT pgq.enqueue('ring_fail', '{"n": "f2"}', max_attempts => 1) AS once_id \gset
SELECT attempt FROM pgq.claim('ring_fail');
SELECT pgq.fail(:once_id, 1, 'only once') AS outcome;
SELECT state, attempt, max_attempts, last_error, dead_reason, payload FROM pgq.job(:once_id);
SELECT count(*) AS rows_of_it FROM pgq.job_rows WHERE id = :once_id;
SELECT pgq.fail(:once_id, 1, 'again') AS outcome_of_a_second_failure;
SELECT l.outcome, count(*) AS closures FROM pgq.job_log l JOIN pgq.queues q ON q.ring_id = l.ring
 WHERE q.name = 'ring_fail' AND l.kind = 'c' GROUP BY l.outcome ORDER BY 1;

-- Release and snooze on the ring: a closure 'r' or 's', and the job pending
-- again as a row, its attempt not spent (release: due as it was, claimed
-- before later jobs; snooze: due after the delay), each fenced as a row's.
SELECT pgq.enqueue('ring_fail', '{"n": "r1"}') AS rel_id \gset
SELECT pgq.enqueue('ring_fail', '{"n": "r2"}') AS later_id \gset
SELECT id = :rel_id AS first, attempt FROM pgq.claim('ring_fail');
SELECT pgq.release(:rel_id, 1) AS released, pgq.release(:rel_id, 1) AS released_twice;
SELECT state, attempt, run_at < enqueued_at + interval '1 minute' AS due_as_it_was
  FROM pgq.job_rows WHERE id = :rel_id;
SELECT id = :rel_id AS released_one_first, attempt FROM pgq.claim('ring_fail');
SELECT pgq.snooze(:later_id, 1, '1 hour') AS snoozed_other;
SELECT pgq.complete(:rel_id, 1) AS completed;
SELECT id = :later_id AS the_other, attempt FROM pgq.claim('ring_fail');
SELECT pgq.snooze(:later_id, 1, '1 hour') AS snoozed, pgq.snooze(:later_id, 1, '1 hour') AS snoozed_twice;
SELECT state, attempt, run_at > now() + interval '59 minutes' AS due_in_an_hour
  FROM pgq.job_rows WHERE id = :later_id;
SELECT count(*) AS claimed_now FROM pgq.claim('ring_fail');
SELECT l.outcome, count(*) AS closures FROM pgq.job_log l JOIN pgq.queues q ON q.ring_id = l.ring
 WHERE q.name = 'ring_fail' AND l.kind = 'c' GROUP BY l.outcome ORDER BY 1;

-- A job id the ring has closed and that is kept nowhere: no row, as for
-- a completed table job of a queue without history.
SELECT count(*) AS rows FROM pgq.job((SELECT id FROM enq WHERE k = 'j3_ring'));
SELECT count(*) AS rows FROM pgq.job(999999999);

-- The ring's jobs are found by id with sequential scans discouraged: no
-- index is used for them (the ring appends without index inserts; a BRIN
-- the segments once had missed the rows of their first pages).
ANALYZE pgq.job_log;
SET enable_seqscan = off;
SELECT k, (SELECT state FROM pgq.job(id)) AS state FROM enq WHERE k IN ('j5_ring', 'j6_ring') ORDER BY k;
SELECT pg_temp.job(id) AS job, state FROM pgq.list_jobs('ring', before_id => (SELECT id FROM enq WHERE k = 'j6_ring'));
RESET enable_seqscan;

-- The counters since the start: a ring queue's completions counted once,
-- as the table queue's after the same steps (they were counted twice).
SELECT replace(c.queue, 'table', 'ring') AS same_as, c.queue, c.claims, c.completions,
       c.failures, c.lease_expiries
  FROM pgq.queue_counters() c WHERE c.queue IN ('ring', 'table', 'ring_kept', 'table_kept')
 ORDER BY 1, 2;

-- A running ring job moved into pgq.job_rows (progress, a failure, a lease that
-- ended) keeps the time of its claim.
SELECT pgq.create_queue('ring_moved', lease => '1 hour');
SELECT pgq.enqueue('ring_moved', '{}') AS moved_id \gset
SELECT id = :moved_id AS claimed FROM pgq.claim('ring_moved', 1);
SELECT claimed_at AS claimed_before FROM pgq.job(:moved_id) \gset
SET pgq.debug_clock_offset = '5min';
SELECT pgq.progress(:moved_id, 1, '{"step": 1}') AS reported;
RESET pgq.debug_clock_offset;
SELECT j.state, j.claimed_at = :'claimed_before' AS claimed_at_kept
  FROM pgq.job_rows j WHERE j.id = :moved_id;

-- A lease that ended, on the ring: a closure 'e', then the job pending
-- again as a row in its old place, its attempt spent, its lease_until kept
-- (a late completion of the expired claim still lands while nobody has
-- claimed it again, ADR 0003), or, on its last attempt, its dead-letter
-- row ('expired').
SELECT pgq.create_queue('ring_expiry', lease => '1 minute');
SELECT pgq.enqueue('ring_expiry', '{"n": "e1"}') AS e1 \gset
SELECT pgq.enqueue('ring_expiry', '{"n": "e2"}', max_attempts => 1) AS e2 \gset
SELECT count(*) AS claimed FROM pgq.claim('ring_expiry', 2);
SET pgq.debug_clock_offset = '10min';
SELECT expired_requeued, expired_dead FROM pgq.maintain();
RESET pgq.debug_clock_offset;
SELECT state, attempt, last_error, lease_until IS NOT NULL AS lease_kept
  FROM pgq.job_rows WHERE id = :e1;
SELECT state, attempt, last_error, dead_reason FROM pgq.job(:e2);
SELECT l.outcome, count(*) AS closures FROM pgq.job_log l JOIN pgq.queues q ON q.ring_id = l.ring
 WHERE q.name = 'ring_expiry' AND l.kind = 'c' GROUP BY l.outcome ORDER BY 1;
SELECT pgq.complete(:e1, 1) AS late_completion_lands, pgq.complete(:e2, 1) AS dead_one_does_not;
SELECT queue, lease_expiries, dead_lettered FROM pgq.queue_counters() WHERE queue = 'ring_expiry';

-- A ring job's history row is written into its segment's table by column
-- name: a segment is a table of its own, whose attributes may be numbered
-- otherwise than the parent's (one attached, or made after a column was
-- dropped). Here the segment taking the queue's completions is replaced by
-- one with its columns in reverse order.
SELECT pgq.create_queue('ring_leaf', keep_completed => '1 hour');
SELECT pgq.enqueue('ring_leaf', '{"n": "first"}') AS leaf1 \gset
SELECT pgq.complete(id, attempt) AS completed FROM pgq.claim('ring_leaf', 1);
SELECT segment AS leaf_segment FROM pgq.job_history WHERE id = :leaf1 \gset
SELECT format('pgq.job_history_%s', :leaf_segment) AS leaf \gset
ALTER TABLE pgq.job_history DETACH PARTITION :leaf;
ALTER TABLE :leaf RENAME TO job_history_detached;
SELECT format('CREATE TABLE %s (%s)', :'leaf',
              string_agg(format('%I %s%s', a.attname, format_type(a.atttypid, a.atttypmod),
                                CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END),
                         ', ' ORDER BY a.attnum DESC)) AS create_leaf
  FROM pg_attribute a
 WHERE a.attrelid = 'pgq.job_history'::regclass AND a.attnum > 0 AND NOT a.attisdropped \gset
:create_leaf;
ALTER TABLE pgq.job_history ATTACH PARTITION :leaf FOR VALUES IN (:leaf_segment);
SELECT pgq.enqueue('ring_leaf', '{"n": "second"}', priority => 0, max_attempts => 3) AS leaf2 \gset
SELECT pgq.complete(id, attempt, '{"ok": true}') AS completed FROM pgq.claim('ring_leaf', 1);
SELECT state, attempt, max_attempts, priority, payload, result, queue = 'ring_leaf' AS in_queue,
       claimed_at <= finished_at AS claimed_before_finish, enqueued_at <= claimed_at AS enqueued_first
  FROM pgq.job(:leaf2);
SELECT count(*) AS in_the_reversed_segment FROM ONLY :leaf WHERE id = :leaf2;

DROP EXTENSION pgq_cpp;
