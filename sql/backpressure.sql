-- Backpressure (issue 34, SPEC §12, ADR 0029 "Backpressure, as built"): a
-- queue's max_pending bounds its unfinished jobs; producers that would pass
-- it are refused whole with 53400, and the count the limit reads is kept
-- exact on every path that makes or ends a job (checked against the tables
-- by pgq.check_pending after each one).
CREATE EXTENSION pgq_cpp;

-- Bad values: 22023 (0 removes the limit in alter_queue only); nothing made.
\set VERBOSITY sqlstate
SELECT pgq.create_queue('bx', max_pending => 0);
SELECT pgq.create_queue('bx', max_pending => -1);
\set VERBOSITY default
SELECT count(*) AS bx FROM pgq.queue_settings() WHERE queue_name = 'bx';

SELECT pgq.create_queue('bp', lease => '1 hour', max_pending => 5);
SELECT queue_name, max_pending FROM pgq.queue_settings('bp');
\set VERBOSITY sqlstate
SELECT pgq.alter_queue('bp', max_pending => -5);
\set VERBOSITY default

-- The kept count against a count of the tables, at the same instant.
CREATE FUNCTION pg_temp.count_of(q text) RETURNS text LANGUAGE sql AS $$
  SELECT format('kept %s, found %s', COALESCE(kept::text, 'none'), found)
    FROM pgq.check_pending(q)$$;
-- Whether a call was refused by max_pending (53400), and what it said.
CREATE FUNCTION pg_temp.refused(call text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE call;
  RETURN 'accepted';
EXCEPTION WHEN configuration_limit_exceeded THEN
  RETURN 'refused: ' || SQLERRM;
END $$;

-- Fills to the limit: a plain job (its ring), a scheduled one (a row), two
-- in one enqueue_many; then one more of each kind is refused whole.
SELECT pgq.enqueue('bp', '{"n": 1}') > 0 AS plain;
SELECT pg_temp.count_of('bp');
SELECT pgq.enqueue('bp', '{"n": 2}', run_at => now() + interval '1 day') > 0 AS scheduled;
SELECT count(*) AS many FROM pgq.enqueue_many('bp', ARRAY['{"n": 3}', '{"n": 4}']::jsonb[]);
SELECT pg_temp.count_of('bp');
SELECT pg_temp.refused($$SELECT pgq.enqueue_many('bp', ARRAY['{"n": 5}', '{"n": 6}']::jsonb[])$$);
SELECT pg_temp.count_of('bp');
SELECT pgq.enqueue('bp', '{"n": 5}') > 0 AS fifth;
SELECT pg_temp.refused($$SELECT pgq.enqueue('bp', '{"n": 6}')$$);
SELECT pg_temp.refused($$SELECT pgq.enqueue('bp', '{"n": 6}', group_key => 'g')$$);
SELECT count(*) AS jobs FROM pgq.jobs j JOIN pgq.queues q USING (queue_id) WHERE q.name = 'bp';
-- The message names the queue, the count and the limit. A dedupe key is
-- looked up after the room is reserved: a full queue refuses it too.
SELECT pgq.enqueue('bp', '{}', dedupe_key => 'any');

-- Nothing waits without room; with no limit, wait_for_room is true at once.
SELECT pgq.wait_for_room('bp', '10 ms') AS room;
SELECT pgq.create_queue('free');
SELECT pgq.wait_for_room('free', '1 hour') AS room_without_limit;

-- Claims, retries and releases leave the count alone; completions,
-- failures into dead-letter and cancels lower it.
CREATE TEMP TABLE claimed AS SELECT id, attempt FROM pgq.claim('bp', 2);
SELECT pg_temp.count_of('bp');
SELECT pgq.fail(id, attempt, 'again') FROM claimed ORDER BY id LIMIT 1;
SELECT pgq.release(id, attempt) FROM claimed ORDER BY id OFFSET 1;
SELECT pg_temp.count_of('bp');
DELETE FROM claimed;
INSERT INTO claimed SELECT id, attempt FROM pgq.claim('bp', 2);
SELECT count(*) AS claimed FROM claimed;
SELECT pgq.complete(id, attempt) FROM claimed ORDER BY id LIMIT 1;
SELECT pg_temp.count_of('bp');
SELECT pgq.complete_many(array_agg(id), array_agg(attempt)) FROM (SELECT * FROM claimed ORDER BY id OFFSET 1) c;
SELECT pg_temp.count_of('bp');
-- Two places free, one under the low-water mark (5 - 5/10 = 5: below it
-- is at most 4): room.
SELECT pgq.wait_for_room('bp', '0') AS room;
-- A cancel of a pending ring job, and of the rows not due yet (the
-- scheduled job, and the failed one waiting for its backoff).
SELECT pgq.cancel(id) FROM pgq.jobs j JOIN pgq.queues q USING (queue_id)
 WHERE q.name = 'bp' AND j.run_at <= now() ORDER BY id LIMIT 1;
SELECT pgq.cancel(id) FROM pgq.jobs j JOIN pgq.queues q USING (queue_id)
 WHERE q.name = 'bp' AND j.run_at > now();
SELECT pg_temp.count_of('bp');
-- retry_dead brings jobs back: counted again (not refused: an operator's
-- act, it may take the queue past its limit for a while).
SELECT pgq.retry_dead('bp') AS revived;
SELECT pg_temp.count_of('bp');

-- Subtransactions: a rolled-back enqueue gives its room back and is not
-- counted; a committed one is.
BEGIN;
SAVEPOINT a;
SELECT pgq.enqueue('bp', '{"in": "savepoint"}') > 0 AS in_savepoint;
ROLLBACK TO SAVEPOINT a;
SAVEPOINT b;
SELECT pgq.enqueue('bp', '{"in": "kept"}') > 0 AS kept;
RELEASE SAVEPOINT b;
COMMIT;
SELECT pg_temp.count_of('bp');
-- A transaction rolled back gives its reservation back too: the queue
-- takes jobs up to its limit again.
BEGIN;
SELECT pgq.enqueue('bp', '{"in": "rolled back"}') > 0 AS fifth_in_rollback;
SELECT pg_temp.refused($$SELECT pgq.enqueue('bp', '{}')$$);
ROLLBACK;
SELECT pg_temp.count_of('bp');
SELECT pgq.enqueue('bp', '{"n": 5}') > 0 AS fifth_again;

-- Raising the limit makes room; 0 removes it.
SELECT pgq.alter_queue('bp', max_pending => 100);
SELECT pgq.wait_for_room('bp', '0') AS room;

-- Dedupe keys: a taken key is no new job; a replace of a running holder
-- adds a follower (one more), a second replace only changes it.
SELECT pgq.enqueue('bp', '{"k": 1}', dedupe_key => 'k') = pgq.enqueue('bp', '{"k": 2}', dedupe_key => 'k') AS same_holder;
SELECT pg_temp.count_of('bp');
DELETE FROM claimed;
INSERT INTO claimed SELECT id, attempt FROM pgq.claim('bp', 20);
SELECT pgq.enqueue('bp', '{"k": 3}', dedupe_key => 'k', on_duplicate => 'replace') > 0 AS follower;
SELECT pgq.enqueue('bp', '{"k": 4}', dedupe_key => 'k', on_duplicate => 'replace') > 0 AS follower_again;
SELECT pg_temp.count_of('bp');
-- The holder's completion moves its follower in (one fewer, one more).
SELECT count(*) FILTER (WHERE pgq.complete(id, attempt)) AS completed FROM claimed;
SELECT pg_temp.count_of('bp');

-- Groups and dependencies: waiting jobs count; a parent's death takes its
-- children with it (dead-lettered, one fewer each).
SELECT pgq.enqueue('bp', '{"g": 1}', group_key => 'g') > 0 AS g1;
SELECT pgq.enqueue('bp', '{"g": 2}', group_key => 'g') > 0 AS g2;
SELECT pgq.enqueue('bp', '{"parent": true}') AS parent \gset
SELECT count(*) AS children FROM pgq.enqueue_many('bp', ARRAY['{"child": 1}', '{"child": 2}']::jsonb[], after => ARRAY[:parent]::bigint[]);
SELECT pg_temp.count_of('bp');
SELECT pgq.cancel(:parent) AS parent_cancelled;
SELECT (pgq.maintain()).expired_dead;
SELECT pg_temp.count_of('bp');

-- Lease expiry: back to pending (no change), or into dead-letter at its
-- last attempt (one fewer). A schedule's firing makes a job.
SELECT pgq.create_queue('bq', max_attempts => 1, lease => '1 second', max_pending => 10);
SELECT pgq.enqueue('bq', '{}') > 0 AS one;
SELECT count(*) AS claimed FROM pgq.claim('bq', 1);
SET pgq.debug_clock_offset = '1h';
SELECT (pgq.maintain()).expired_dead AS expired_dead;
RESET pgq.debug_clock_offset;
SELECT pg_temp.count_of('bq');
SELECT pgq.schedule('every_minute', 'bq', '* * * * *') IS NULL AS scheduled;
SET pgq.debug_clock_offset = '2min';
SELECT (pgq.maintain()).schedules_fired AS fired;
RESET pgq.debug_clock_offset;
SELECT pg_temp.count_of('bq');

-- Moves between a ring and a row change nothing: a lease that ran out with
-- attempts left, a failed job due again at once and claimed from its row
-- onto the ring, its completion there.
SELECT pgq.create_queue('br', max_attempts => 5, lease => '1 second', max_pending => 10);
SELECT pgq.enqueue('br', '{}') > 0 AS one;
SELECT count(*) AS claimed FROM pgq.claim('br', 1);
SET pgq.debug_clock_offset = '1h';
SELECT (pgq.maintain()).expired_requeued AS expired_requeued;
SELECT pg_temp.count_of('br');
SELECT pgq.fail(id, attempt, 'now', retry_in => '0') FROM pgq.claim('br', 1, '1 hour');
SELECT pg_temp.count_of('br');
SELECT pgq.complete(id, attempt) FROM pgq.claim('br', 1, '1 hour');
RESET pgq.debug_clock_offset;
SELECT pg_temp.count_of('br');

-- publish: every subscribed queue's room or nothing of the publish.
SELECT pgq.create_topic('signups');
SELECT pgq.create_queue('tight', max_pending => 1);
SELECT pgq.subscribe('signups', 'bq');
SELECT pgq.subscribe('signups', 'tight');
SELECT pgq.publish('signups', '{"user": 1}') > 0 AS published;
SELECT pg_temp.refused($$SELECT pgq.publish('signups', '{"user": 2}')$$);
SELECT count(*) AS events FROM pgq.events WHERE topic = 'signups';
SELECT pg_temp.count_of('bq'), pg_temp.count_of('tight');

-- A transaction whose notes do not fit its ledger (256 (savepoint, queue)
-- pairs: here 270 nested savepoints each making a job) forgets every count
-- of the database at its commit; the next producer counts again, exactly.
SELECT pgq.create_queue('free2');
CREATE FUNCTION pg_temp.nest(n int) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pgq.enqueue('free2', '{}');
  IF n > 0 THEN PERFORM pg_temp.nest(n - 1); END IF;
EXCEPTION WHEN division_by_zero THEN RAISE;
END $$;
SELECT pg_temp.count_of('bq');
SELECT pg_temp.nest(270);
SELECT kept IS NULL AS forgotten, found FROM pgq.check_pending('bq');
SELECT pg_temp.count_of('bq');
-- With a max_pending, the reservations must be noted: 54000 past them.
SELECT pgq.alter_queue('free2', max_pending => 100000);
\set VERBOSITY sqlstate
SELECT pg_temp.nest(270);
\set VERBOSITY default
SELECT pg_temp.count_of('free2');

-- Rights: wait_for_room needs produce or admin (42501), check_pending admin.
CREATE ROLE bp_reader;
SELECT pgq.grant('bp_reader', 'bq', 'consume');
SET ROLE bp_reader;
\set VERBOSITY sqlstate
SELECT pgq.wait_for_room('bq', '0');
SELECT * FROM pgq.check_pending('bq');
SELECT pgq.wait_for_room('nosuch', '0');
\set VERBOSITY default
RESET ROLE;

-- The metrics: the refusals and the kept count of each limited queue.
SELECT line FROM regexp_split_to_table(pgq.metrics(), E'\n') line
 WHERE line ~ '^pgq_(max_pending_refusals_total|queue_unfinished)\{' ORDER BY line;

SELECT pgq.revoke('bp_reader', 'bq', 'consume');
DROP ROLE bp_reader;
DROP EXTENSION pgq_cpp;
