-- Queues on segment rings (issue 33, docs/adr/0028-queues-on-rings.md).
-- Every queue has a ring: its plain jobs (due now, no group, no dedupe key,
-- no parents, priority 0) are entries of its ring and never rows of
-- pgq.job_rows; every other job of it goes to pgq.job_rows (a job of
-- another priority too, until the maintenance gives that priority a ring:
-- sql/ring_priorities.sql). On a ring job,
-- claim, complete, complete_many, fail, extend, release and lease expiry
-- give what they give on any job (sql/claim.sql, sql/finish.sql,
-- sql/maintain.sql). pgq.job_rows does not see ring jobs (the readers do:
-- sql/ring_reads.sql): it is read here only to show that a plain job is not
-- in it and that the other jobs are. Where a claim hands out table jobs and
-- ring entries together, the table jobs come first in SPEC order too.
CREATE EXTENSION pgq_cpp;

-- (First, while no other queue of the database holds a lane.)
-- A queue that can have no lane (every one of the database's share held
-- by queues with running jobs or in use) is never refused for it: an
-- enqueue puts its jobs in pgq.job_rows, a claim takes from there only and
-- the ring's entries wait until a lane is idle again.
SELECT pgq.create_queue('lane_a');
SELECT pgq.create_queue('lane_b');
SELECT pgq.create_queue('lane_c');
SELECT pgq.enqueue('lane_a', '{}') IS NOT NULL AS enqueued;
SELECT pgq.enqueue('lane_b', '{"k": "on the ring"}') AS ring_job \gset
SELECT id AS lane_a_job, attempt AS lane_a_attempt FROM pgq.claim('lane_a', 1) \gset
SET pgq.max_ring_queues_per_database = 1;
-- lane_a runs a job: lane_c takes back lane_b's idle lane but may not keep
-- it (the share is used).
SELECT pgq.enqueue('lane_c', '{"k": "no lane"}') AS no_lane_job \gset
SELECT count(*) AS in_job_rows FROM pgq.job_rows WHERE id = :no_lane_job;
SELECT count(*) AS ring_entry_waits FROM pgq.claim('lane_b', 10);
SELECT id = :no_lane_job AS from_job_rows, pgq.complete(id, attempt) AS completed
  FROM pgq.claim('lane_c', 10);
SELECT pgq.complete(:lane_a_job, :lane_a_attempt) AS completed;
SELECT id = :ring_job AS from_the_ring, pgq.complete(id, attempt) AS completed
  FROM pgq.claim('lane_b', 10);
RESET pgq.max_ring_queues_per_database;

-- Every queue gets a ring of its own at create_queue (ADR 0028).
SELECT pgq.create_queue('ring', max_attempts => 3, lease => '5 minutes',
                        backoff_base => '10 seconds', backoff_max => '25 seconds');
SELECT pgq.create_queue('ring_once', max_attempts => 1);
SELECT name, ring_id IS NOT NULL AS on_a_ring FROM pgq.queues ORDER BY queue_id;
SELECT count(DISTINCT ring_id) AS rings FROM pgq.queues;

-- Each job's id, by a name that its payload carries too ({"k": name}): a
-- claim shows the name its id was enqueued under (job) beside its payload's.
CREATE TEMP TABLE enq (k text PRIMARY KEY, id bigint NOT NULL UNIQUE);
CREATE FUNCTION pg_temp.job(bigint) RETURNS text LANGUAGE sql AS 'SELECT k FROM enq WHERE id = $1';

-- Jobs that are not plain go to pgq.job_rows, as on any queue (but for a
-- grouped job whose group has room, ring_groups.sql, and a job with a
-- dedupe key, its key's row in pgq.dedupe_holds, ring_dedupe.sql: on the
-- ring).
INSERT INTO enq VALUES ('later', pgq.enqueue('ring', '{"k": "later"}', run_at => pgq.clock() + interval '1 hour'));
INSERT INTO enq VALUES ('grouped', pgq.enqueue('ring', '{"k": "grouped"}', group_key => 'g'));
INSERT INTO enq VALUES ('deduped', pgq.enqueue('ring', '{"k": "deduped"}', dedupe_key => 'd'));
INSERT INTO enq VALUES ('child', pgq.enqueue('ring', '{"k": "child"}',
                                             after => ARRAY[(SELECT id FROM enq WHERE k = 'later')]));
-- Plain jobs, one at a time and in a batch: on the ring.
INSERT INTO enq VALUES ('n1', pgq.enqueue('ring', '{"k": "n1"}'));
INSERT INTO enq SELECT 'n' || (o + 1), id
  FROM pgq.enqueue_many('ring', ARRAY['{"k": "n2"}', '{"k": "n3"}', '{"k": "n4"}']::jsonb[])
       WITH ORDINALITY AS e(id, o);
-- A job's own max_attempts leaves it plain.
INSERT INTO enq VALUES ('n5', pgq.enqueue('ring', '{"k": "n5"}', max_attempts => 2));
INSERT INTO enq VALUES ('urgent', pgq.enqueue('ring', '{"k": "urgent"}', priority => 5));
SELECT q.name AS queue, j.payload->>'k' AS k, j.state, j.id = e.id AS same_id
  FROM pgq.job_rows j JOIN pgq.queues q USING (queue_id) JOIN enq e ON e.k = j.payload->>'k'
 ORDER BY j.id;
SELECT count(*) AS ids, count(DISTINCT id) AS distinct_ids FROM enq;
-- The dedupe key is held as before.
SELECT pgq.enqueue('ring', '{"k": "deduped again"}', dedupe_key => 'd') = id AS same_holder
  FROM enq WHERE k = 'deduped';

-- claim: the due table jobs (priority first), then the ring's entries in the
-- order they were enqueued; attempt 1, the queue's lease, every column.
SELECT pg_temp.job(id) AS job, payload->>'k' AS payload, queue, attempt, max_attempts, priority,
       lease_until - pgq.clock() BETWEEN interval '4 minutes 59 seconds' AND interval '5 minutes' AS queue_lease
  FROM pgq.claim('ring', 2);
SELECT pg_temp.job(id) AS job, payload->>'k' AS payload, queue, attempt, max_attempts, priority,
       enqueued_at <= pgq.clock() AS enqueued_before
  FROM pgq.claim('ring', 3);
SELECT pg_temp.job(id) AS job, payload->>'k' AS payload, attempt, max_attempts,
       lease_until - pgq.clock() BETWEEN interval '59 seconds' AND interval '1 minute' AS own_lease
  FROM pgq.claim('ring', 10, lease => '1 minute');
SELECT count(*) AS nothing_due FROM pgq.claim('ring', 10);
SELECT count(*) AS ring_rows_in_pgq_jobs
  FROM pgq.job_rows WHERE id IN (SELECT id FROM enq WHERE k LIKE 'n_');

-- complete: true once for the claim's (id, attempt), false otherwise.
SELECT id AS n1 FROM enq WHERE k = 'n1' \gset
SELECT pgq.complete(:n1, 2) AS wrong_attempt;
SELECT pgq.complete(:n1, 1) AS completed;
SELECT pgq.complete(:n1, 1) AS completed_twice;
SELECT pgq.complete(999999, 1) AS unknown_job;
-- The table jobs claimed beside them complete as before.
SELECT k, pgq.complete(id, 1) AS completed FROM enq WHERE k IN ('urgent', 'grouped') ORDER BY k;

-- complete_many: how many landed; a wrong attempt or an unknown id does not.
SELECT pgq.complete_many(array_agg(id ORDER BY k) || 999999::bigint, '{1, 1, 1, 2, 1, 1}') AS completed
  FROM enq WHERE k IN ('deduped', 'n2', 'n3', 'n4', 'n5');
SELECT pgq.complete_many(array_agg(id ORDER BY k), '{1, 1, 1, 1, 1}') AS completed_again
  FROM enq WHERE k IN ('deduped', 'n2', 'n3', 'n4', 'n5');
SELECT count(*) AS nothing_due FROM pgq.claim('ring', 10);

-- A ring job nobody claimed: nothing to complete, fail, extend or release.
INSERT INTO enq VALUES ('p1', pgq.enqueue('ring', '{"k": "p1"}'));
SELECT id AS p1 FROM enq WHERE k = 'p1' \gset
SELECT pgq.complete(:p1, 0) AS complete_0, pgq.complete(:p1, 1) AS complete_1,
       pgq.fail(:p1, 1) AS fail_1, pgq.extend(:p1, 1, '1 minute') AS extend_1,
       pgq.release(:p1, 1) AS release_1;
SELECT pg_temp.job(id) AS job, attempt FROM pgq.claim('ring');
SELECT pgq.complete_many(ARRAY[:p1]::bigint[], '{1}') AS completed;

-- A claim that rolls back gives its ring jobs back: the next claim gets the
-- same jobs, with the attempt number the rolled-back claim had.
INSERT INTO enq SELECT 'b' || o, id
  FROM pgq.enqueue_many('ring', ARRAY['{"k": "b1"}', '{"k": "b2"}']::jsonb[]) WITH ORDINALITY AS e(id, o);
BEGIN;
SELECT pg_temp.job(id) AS job, attempt FROM pgq.claim('ring', 10);
ROLLBACK;
SELECT pg_temp.job(id) AS job, attempt FROM pgq.claim('ring', 1);
-- The same inside a transaction that commits: a claim rolled back to a
-- savepoint never happened.
BEGIN;
SAVEPOINT before_claim;
SELECT pg_temp.job(id) AS job, attempt FROM pgq.claim('ring', 10);
ROLLBACK TO SAVEPOINT before_claim;
SELECT pg_temp.job(id) AS job, attempt FROM pgq.claim('ring', 10);
COMMIT;
SELECT count(*) AS nothing_due FROM pgq.claim('ring', 10);
SELECT pgq.complete_many(array_agg(id), '{1, 1}') AS completed FROM enq WHERE k IN ('b1', 'b2');

-- fail with attempts left: 'retry', and the job comes back for its next
-- attempt after its backoff (attempt k waits [base/2, base] * 2^(k-1)).
INSERT INTO enq VALUES ('f1', pgq.enqueue('ring', '{"k": "f1"}'));
SELECT id AS f1 FROM enq WHERE k = 'f1' \gset
SELECT pg_temp.job(id) AS job, attempt FROM pgq.claim('ring');
SELECT pgq.fail(:f1, 2, 'wrong attempt') AS wrong_attempt;
SELECT pgq.fail(:f1, 1, 'smtp timeout');
SELECT pgq.fail(:f1, 1, 'again') AS fail_twice;
SELECT pgq.complete(:f1, 1) AS complete_after_fail;
SELECT count(*) AS during_backoff FROM pgq.claim('ring');
SET pgq.debug_clock_offset = '1min';
SELECT pg_temp.job(id) AS job, attempt, max_attempts FROM pgq.claim('ring');
SELECT pgq.fail(:f1, 2, 'smtp timeout');
SET pgq.debug_clock_offset = '2min';
SELECT pg_temp.job(id) AS job, attempt FROM pgq.claim('ring');
-- With none left: dead-letter, the job kept whole, reason 'exhausted'.
SELECT pgq.fail(:f1, 3, 'mailbox does not exist');
SELECT pg_temp.job(id) AS job, queue, payload, attempts, last_error, reason
  FROM pgq.dead_jobs WHERE id = :f1;
SELECT count(*) AS nothing_due FROM pgq.claim('ring');
SELECT pgq.complete(:f1, 3) AS complete_dead;
RESET pgq.debug_clock_offset;

-- fail with retry_in: exactly that delay.
INSERT INTO enq VALUES ('f2', pgq.enqueue('ring', '{"k": "f2"}'));
SELECT id AS f2 FROM enq WHERE k = 'f2' \gset
SELECT pg_temp.job(id) AS job, attempt FROM pgq.claim('ring');
SELECT pgq.fail(:f2, 1, NULL, retry_in => '10 minutes');
SET pgq.debug_clock_offset = '9min';
SELECT count(*) AS before_retry_in FROM pgq.claim('ring');
SET pgq.debug_clock_offset = '11min';
SELECT pg_temp.job(id) AS job, attempt FROM pgq.claim('ring');
SELECT pgq.complete(:f2, 2) AS completed;
RESET pgq.debug_clock_offset;

-- A job's own max_attempts, and a queue's, of 1: the first failure is its last.
INSERT INTO enq VALUES ('m1', pgq.enqueue('ring', '{"k": "m1"}', max_attempts => 1));
INSERT INTO enq VALUES ('o1', pgq.enqueue('ring_once', '{"k": "o1"}'));
SELECT pg_temp.job(id) AS job, queue, attempt, max_attempts FROM pgq.claim('ring');
SELECT pg_temp.job(id) AS job, queue, attempt, max_attempts FROM pgq.claim('ring_once');
SELECT k, pgq.fail(id, 1, 'bad input') FROM enq WHERE k IN ('m1', 'o1') ORDER BY k;
SELECT pg_temp.job(id) AS job, queue, payload, attempts, last_error, reason
  FROM pgq.dead_jobs WHERE id IN (SELECT id FROM enq WHERE k IN ('m1', 'o1')) ORDER BY queue;
SELECT count(*) AS nothing_due FROM pgq.claim('ring', 10);
SELECT count(*) AS nothing_due FROM pgq.claim('ring_once', 10);

-- extend: a heartbeat; the new lease holds past the old one.
INSERT INTO enq VALUES ('e1', pgq.enqueue('ring', '{"k": "e1"}'));
SELECT id AS e1 FROM enq WHERE k = 'e1' \gset
SELECT pg_temp.job(id) AS job, attempt FROM pgq.claim('ring', 1, lease => '10 seconds');
SELECT pgq.extend(:e1, 1, '10 minutes') - pgq.clock()
       BETWEEN interval '9 minutes 59 seconds' AND interval '10 minutes' AS extended;
SELECT pgq.extend(:e1, 2, '10 minutes') AS wrong_attempt;
SET pgq.debug_clock_offset = '1min';
SELECT count(*) AS maintained FROM pgq.maintain();
SELECT count(*) AS still_leased FROM pgq.claim('ring');
SELECT pgq.complete(:e1, 1) AS completed;
RESET pgq.debug_clock_offset;

-- release: given back at once without counting the attempt.
INSERT INTO enq VALUES ('l1', pgq.enqueue('ring', '{"k": "l1"}'));
SELECT id AS l1 FROM enq WHERE k = 'l1' \gset
SELECT pg_temp.job(id) AS job, attempt FROM pgq.claim('ring');
SELECT pgq.release(:l1, 2) AS wrong_attempt;
SELECT pgq.release(:l1, 1) AS released;
SELECT pgq.release(:l1, 1) AS released_twice;
SELECT pgq.complete(:l1, 1) AS complete_released;
SELECT pgq.extend(:l1, 1, '1 minute') AS extend_released;
SELECT pg_temp.job(id) AS job, attempt AS same_attempt_number FROM pgq.claim('ring');
SELECT pgq.extend(:l1, 1, '1 minute') IS NOT NULL AS extend_after_reclaim;
SELECT pgq.complete(:l1, 1) AS completed_after_release;

-- Lease expiry: never before the lease ends; then the job is claimable
-- again as attempt 2 and the old claim is fenced out.
INSERT INTO enq VALUES ('x1', pgq.enqueue('ring', '{"k": "x1"}'));
SELECT id AS x1 FROM enq WHERE k = 'x1' \gset
SELECT pg_temp.job(id) AS job, attempt FROM pgq.claim('ring', 1, lease => '1 minute');
SELECT count(*) AS maintained FROM pgq.maintain();
SELECT count(*) AS lease_running FROM pgq.claim('ring');
SET pgq.debug_clock_offset = '2min';
SELECT count(*) AS maintained FROM pgq.maintain();
SELECT pg_temp.job(id) AS job, attempt FROM pgq.claim('ring');
SELECT pgq.complete(:x1, 1) AS stale_complete;
SELECT pgq.fail(:x1, 1, 'stale') AS stale_fail;
SELECT pgq.extend(:x1, 1, '1 minute') AS stale_extend;
SELECT pgq.release(:x1, 1) AS stale_release;
SELECT pgq.complete_many(ARRAY[:x1]::bigint[], '{1}') AS stale_complete_many;
SELECT pgq.complete(:x1, 2) AS current_complete;
RESET pgq.debug_clock_offset;

-- A lease that expires on the last attempt: dead-letter, reason 'expired'.
INSERT INTO enq VALUES ('x2', pgq.enqueue('ring', '{"k": "x2"}', max_attempts => 1));
SELECT id AS x2 FROM enq WHERE k = 'x2' \gset
SELECT pg_temp.job(id) AS job, attempt FROM pgq.claim('ring', 1, lease => '1 minute');
SET pgq.debug_clock_offset = '2min';
SELECT count(*) AS maintained FROM pgq.maintain();
SELECT pg_temp.job(id) AS job, attempts, reason, last_error FROM pgq.dead_jobs WHERE id = :x2;
SELECT count(*) AS nothing_due FROM pgq.claim('ring');
SELECT pgq.complete(:x2, 1) AS complete_dead;
RESET pgq.debug_clock_offset;

-- Finished jobs never come back: a day later, after maintenance, only the
-- delayed job and then its child are handed out.
SET pgq.debug_clock_offset = '1d';
SELECT count(*) AS maintained FROM pgq.maintain();
SELECT pg_temp.job(id) AS job, attempt, pgq.complete(id, attempt) AS completed FROM pgq.claim('ring', 100);
SELECT pg_temp.job(id) AS job, attempt, pgq.complete(id, attempt) AS completed FROM pgq.claim('ring', 100);
SELECT count(*) AS nothing_due FROM pgq.claim('ring', 100);
SELECT count(*) AS nothing_due FROM pgq.claim('ring_once', 100);
RESET pgq.debug_clock_offset;
SELECT count(*) AS ring_rows_in_pgq_jobs
  FROM pgq.job_rows j JOIN pgq.queues q USING (queue_id) WHERE q.ring_id IS NOT NULL;

-- drop_queue counts the jobs on a ring as those of pgq.job_rows: a ring queue
-- holding pending or running jobs is refused without force (55006), and
-- dropped with its ring with force: the ring leaves the ledger at once and
-- is listed in pgq.rings_dropped; its tables (and its rows, which no reader
-- shows: they join pgq.queues) go at the maintenance's next pass, which
-- alone locks pgq.job_log exclusively to drop them.
SELECT pgq.create_queue('ring_drop');
SELECT ring_id AS ring_drop_ring FROM pgq.queues WHERE name = 'ring_drop' \gset
SELECT count(*) AS enqueued FROM pgq.enqueue_many('ring_drop', ARRAY['{"n": 1}', '{"n": 2}']::jsonb[]);
SELECT count(*) AS claimed FROM pgq.claim('ring_drop', 1);
SELECT pgq.drop_queue('ring_drop');
SELECT pgq.drop_queue('ring_drop', force => true);
SELECT count(*) AS ledger_rows FROM pgq.rings WHERE ring_id = :ring_drop_ring;
SELECT root, ring_id = :ring_drop_ring AS its_ring FROM pgq.rings_dropped;
SELECT count(*) AS rows_shown FROM pgq.jobs WHERE payload ? 'n';
SELECT count(*) AS ring_tables_before_pass FROM pg_class
 WHERE relnamespace = 'pgq'::regnamespace
   AND relname ~ ('^job_log_' || :ring_drop_ring || '(_[0-9]+)?$');
SELECT count(*) AS maintained FROM pgq.maintain();
SELECT count(*) AS ring_tables_left FROM pg_class
 WHERE relname LIKE 'job\_log\_%' AND relnamespace = 'pgq'::regnamespace
   AND relname NOT IN (SELECT 'job_log_' || ring_id FROM pgq.queue_rings)
   AND relname NOT LIKE ALL (SELECT 'job_log_' || ring_id || '_%' FROM pgq.queue_rings);
SELECT count(*) AS still_listed FROM pgq.rings_dropped;


-- A line pointer is never reused behind the claim cursor: a rolled-back
-- entry, a committed one claimed past it, a VACUUM of the segment (which
-- would make the dead row's line pointer free), then a new entry: it is
-- claimed, not placed behind the cursor and skipped. The segments keep dead
-- line pointers dead (vacuum_index_cleanup = off).
SELECT pgq.create_queue('ring_vacuum');
BEGIN;
SELECT pgq.enqueue('ring_vacuum', '{"n": "rolled back"}') > 0 AS enqueued;
ROLLBACK;
SELECT pgq.enqueue('ring_vacuum', '{"n": "first"}') > 0 AS enqueued;
SELECT payload->>'n' AS n, pgq.complete(id, attempt) AS completed FROM pgq.claim('ring_vacuum', 10);
SELECT format('VACUUM pgq.job_log_%s_0', ring_id) FROM pgq.queues WHERE name = 'ring_vacuum' \gexec
SELECT pgq.enqueue('ring_vacuum', '{"n": "after the vacuum"}') > 0 AS enqueued;
SELECT payload->>'n' AS n, pgq.complete(id, attempt) AS completed FROM pgq.claim('ring_vacuum', 10);
SELECT count(*) AS options_kept FROM pg_class c JOIN pgq.queues q ON c.relname = 'job_log_' || q.ring_id || '_0'
 WHERE q.name = 'ring_vacuum' AND 'vacuum_index_cleanup=off' = ANY (c.reloptions);

-- A claim rolled back gives its jobs back to the lane's given-back list
-- (4096 entries): a claim takes no more than the list has room for if it
-- and every other claim in progress roll back. Before, a rolled-back claim
-- of 5,000 gave back 4,096 and left 904 out until the next restart.
SELECT pgq.create_queue('ring_back');
SELECT count(*) AS enqueued FROM pgq.enqueue_many('ring_back', array_fill('{}'::jsonb, ARRAY[5000]));
BEGIN;
SELECT count(*) AS claimed FROM pgq.claim('ring_back', 5000);
SELECT count(*) AS claimed_beside FROM pgq.claim('ring_back', 5000);
ROLLBACK;
CREATE TEMP TABLE back AS SELECT id FROM pgq.claim('ring_back', 10000);
INSERT INTO back SELECT id FROM pgq.claim('ring_back', 10000);
SELECT count(*) AS claimed_again, count(DISTINCT id) AS jobs FROM back;
SELECT count(*) AS left_over FROM pgq.claim('ring_back', 10000);

-- A queue without a ring (a queue of 2.x after the update; made here by
-- taking its ring away, then an alter_queue so that cached queues learn it)
-- keeps its jobs in pgq.job_rows until the maintenance gives it a ring;
-- then its new plain jobs go to the ring, and a claim takes the old ones
-- first (claim order: run_at, then id, across both).
SELECT pgq.create_queue('old');
UPDATE pgq.queues SET ring_id = NULL WHERE name = 'old';
SELECT pgq.alter_queue('old', max_attempts => 5);
INSERT INTO enq VALUES ('old1', pgq.enqueue('old', '{"k": "old1"}'));
SELECT count(*) AS in_job_rows FROM pgq.job_rows WHERE id = (SELECT id FROM enq WHERE k = 'old1');
SELECT count(*) AS maintained FROM pgq.maintain();
SELECT ring_id IS NOT NULL AS given_a_ring FROM pgq.queues WHERE name = 'old';
INSERT INTO enq VALUES ('old2', pgq.enqueue('old', '{"k": "old2"}'));
SELECT count(*) AS in_job_rows FROM pgq.job_rows WHERE id = (SELECT id FROM enq WHERE k = 'old2');
SELECT pg_temp.job(id) AS job, payload->>'k' AS payload, pgq.complete(id, attempt) AS completed
  FROM pgq.claim('old', 10);

-- A capped queue whose claim passes the lease map's share: the jobs past
-- the room spill into running rows of pgq.job_rows, and they count against
-- max_running as the leased ones do (a claim at the cap takes none, and
-- the spilled job's completion makes room).
SELECT pgq.create_queue('ring_spill_cap', max_running => 3, lease => '1 hour');
SELECT count(*) AS enqueued FROM pgq.enqueue_many('ring_spill_cap', array_fill('{}'::jsonb, ARRAY[6]));
SELECT set_config('pgq.max_running_ring_jobs_per_database', (count(*) + 2)::text, false)
       IS NOT NULL AS room_for_two FROM pgq.ring_running_jobs();
CREATE TEMP TABLE capped AS SELECT id, attempt FROM pgq.claim('ring_spill_cap', 5);
SELECT count(*) AS claimed,
       count(*) FILTER (WHERE EXISTS (SELECT 1 FROM pgq.job_rows j WHERE j.id = c.id)) AS spilled
  FROM capped c;
SELECT count(*) AS claimed_at_the_cap FROM pgq.claim('ring_spill_cap', 5);
SELECT pgq.complete(id, attempt) AS spilled_one_completed FROM capped c
 WHERE EXISTS (SELECT 1 FROM pgq.job_rows j WHERE j.id = c.id);
SELECT count(*) AS claimed_after FROM pgq.claim('ring_spill_cap', 5);
RESET pgq.max_running_ring_jobs_per_database;


DROP EXTENSION pgq_cpp;
