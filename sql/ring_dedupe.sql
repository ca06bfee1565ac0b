-- Jobs with a dedupe key on the queues' rings (issue 33, ADR 0028 "Dedupe
-- keys on the rings"): pgq.dedupe_holds names each key's holder, live
-- (held_until NULL) or finished within its dedupe_for; a job with a key that
-- is due now, with no group or parents, is an entry of its queue's ring.
-- Every end of such a job lets its key go (or keeps it for its period), a
-- requeue keeps it, and every reader shows the key.
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('kd', lease => '1 minute', max_attempts => 2, backoff_base => '1 second',
                        keep_completed => '1 hour');
CREATE TEMP TABLE enq (k text PRIMARY KEY, id bigint NOT NULL);
CREATE FUNCTION pg_temp.where_is(bigint) RETURNS text LANGUAGE sql AS $$
  SELECT CASE WHEN EXISTS (SELECT FROM pgq.job_rows WHERE id = $1) THEN 'job_rows'
              WHEN EXISTS (SELECT FROM pgq.ring_jobs WHERE id = $1) THEN 'ring'
              ELSE 'gone' END $$;
CREATE FUNCTION pg_temp.holder(text) RETURNS text LANGUAGE sql AS $$
  SELECT coalesce((SELECT e.k || CASE WHEN h.held_until IS NULL THEN ' (live)' ELSE ' (period)' END
                     FROM pgq.dedupe_holds h LEFT JOIN enq e ON e.id = h.job_id
                    WHERE h.dedupe_key = $1), 'free') $$;

-- ---- Where a job with a key goes -------------------------------------------
INSERT INTO enq VALUES ('a', pgq.enqueue('kd', '{"n": "a"}', dedupe_key => 'ka'));
INSERT INTO enq VALUES ('later', pgq.enqueue('kd', '{"n": "later"}', dedupe_key => 'kl',
                                             run_at => pgq.clock() + interval '1 hour'));
INSERT INTO enq VALUES ('grouped', pgq.enqueue('kd', '{"n": "grouped"}', dedupe_key => 'kg',
                                               group_key => 'g'));
INSERT INTO enq VALUES ('child', pgq.enqueue('kd', '{"n": "child"}', dedupe_key => 'kc',
                                             after => ARRAY[(SELECT id FROM enq WHERE k = 'later')]));
SELECT k, pg_temp.where_is(id) AS kept, pg_temp.holder('k' || substr(k, 1, 1)) AS key_holder
  FROM enq ORDER BY id;
-- The entry carries the key; the duplicate returns the holder, adds nothing.
SELECT l.kind, l.dedupe_key, l.dedupe_for FROM pgq.job_log l JOIN enq e ON e.id = l.id WHERE e.k = 'a';
SELECT pgq.enqueue('kd', '{"n": "again"}', dedupe_key => 'ka') = id AS same_holder
  FROM enq WHERE k = 'a';
SELECT count(*) AS entries FROM pgq.job_log WHERE kind = 'e';
-- Every reader shows the key.
SELECT j.dedupe_key, j.state FROM pgq.job((SELECT id FROM enq WHERE k = 'a')) j;
SELECT dedupe_key, state FROM pgq.jobs WHERE id = (SELECT id FROM enq WHERE k = 'a');
SELECT payload->>'n' AS n, dedupe_key FROM pgq.list_jobs('kd') WHERE dedupe_key = 'ka';
SELECT payload->>'n' AS n, state FROM pgq.find_jobs('ka');
-- (The grouped one, a row, would be claimed first below: cancelled.)
SELECT pgq.cancel(id) AS cancelled, pg_temp.holder('kg') AS key_holder FROM enq WHERE k = 'grouped';

-- ---- A key and a group ------------------------------------------------------
-- On the ring while its group has room, held by its key's row and its
-- group's hold; the group's next job waits as a row with its key, and is
-- handed out when the first completes.
SELECT pgq.create_queue('kgq');
INSERT INTO enq VALUES ('g1', pgq.enqueue('kgq', '{"n": "g1"}', dedupe_key => 'kg1', group_key => 'conv'));
INSERT INTO enq VALUES ('g2', pgq.enqueue('kgq', '{"n": "g2"}', dedupe_key => 'kg2', group_key => 'conv'));
SELECT k, pg_temp.where_is(id) AS kept, pg_temp.holder('k' || k) AS key_holder,
       (SELECT count(*) FROM pgq.group_holds h WHERE h.job_id = e.id) AS group_holds
  FROM enq e WHERE k IN ('g1', 'g2') ORDER BY id;
SELECT pgq.enqueue('kgq', '{"n": "dup"}', dedupe_key => 'kg1', group_key => 'conv') = id AS same_holder
  FROM enq WHERE k = 'g1';
SELECT payload->>'n' AS claimed FROM pgq.claim('kgq', 5);
SELECT pgq.complete(id, 1) AS done FROM enq WHERE k = 'g1';
SELECT pg_temp.holder('kg1') AS g1_key, (SELECT count(*) FROM pgq.group_holds) AS group_holds;
SELECT payload->>'n' AS claimed FROM pgq.claim('kgq', 5);
SELECT pgq.complete(id, 1) AS done, pg_temp.holder('kg2') AS g2_key FROM enq WHERE k = 'g2';

-- ---- Running on the ring: still the holder; complete frees the key --------
SELECT pgq.complete(id, attempt) AS completed FROM pgq.claim('kd');
SELECT pg_temp.holder('ka') AS key_holder;
-- The history row keeps the key.
SELECT h.dedupe_key FROM pgq.job_history h JOIN enq e ON e.id = h.id WHERE e.k = 'a';
INSERT INTO enq VALUES ('a2', pgq.enqueue('kd', '{"n": "a2"}', dedupe_key => 'ka'));
SELECT id <> (SELECT id FROM enq WHERE k = 'a') AS new_job, pg_temp.where_is(id) AS kept
  FROM enq WHERE k = 'a2';
SELECT id = (SELECT id FROM enq WHERE k = 'a2') AS claimed_a2, attempt FROM pgq.claim('kd') \gset
SELECT pgq.enqueue('kd', '{"n": "dup while running"}', dedupe_key => 'ka') = id AS running_holds
  FROM enq WHERE k = 'a2';

-- ---- A retry keeps the key (a row now); the dead job lets it go ----------
SELECT pgq.fail(id, 1, 'boom') AS first_failure FROM enq WHERE k = 'a2';
SELECT pg_temp.where_is(id) AS kept, pg_temp.holder('ka') AS key_holder,
       (SELECT dedupe_key FROM pgq.job_rows j WHERE j.id = e.id) AS row_key
  FROM enq e WHERE k = 'a2';
SET pgq.debug_clock_offset = '1min';
SELECT id = (SELECT id FROM enq WHERE k = 'a2') AS claimed_again, attempt FROM pgq.claim('kd');
SELECT pgq.fail(id, 2, 'boom') AS second_failure FROM enq WHERE k = 'a2';
RESET pgq.debug_clock_offset;
SELECT pg_temp.holder('ka') AS key_holder,
       (SELECT dedupe_key FROM pgq.dead_jobs d WHERE d.id = e.id) AS dead_key
  FROM enq e WHERE k = 'a2';

-- ---- Dead on its ring, with a period: the key stays the dead job's --------
INSERT INTO enq VALUES ('p', pgq.enqueue('kd', '{"n": "p"}', dedupe_key => 'kp',
                                         dedupe_for => '1 hour', max_attempts => 1));
SELECT pg_temp.where_is(id) AS kept FROM enq WHERE k = 'p';
SELECT pgq.fail(id, attempt, 'gone') AS outcome FROM pgq.claim('kd');
SELECT pg_temp.holder('kp') AS key_holder,
       pgq.enqueue('kd', '{"n": "p again"}', dedupe_key => 'kp') = id AS held_by_dead_job
  FROM enq WHERE k = 'p';
-- retry_dead: the period is its own: it comes back, holding the key live.
SELECT pgq.retry_dead(id) AS revived FROM enq WHERE k = 'p';
SELECT pg_temp.holder('kp') AS key_holder, pg_temp.where_is(id) AS kept FROM enq WHERE k = 'p';
SELECT pgq.cancel(id) AS cancelled FROM enq WHERE k = 'p';
SELECT pg_temp.holder('kp') AS key_holder_after_cancel;
-- Past the period the key is free again.
SET pgq.debug_clock_offset = '2h';
INSERT INTO enq VALUES ('p2', pgq.enqueue('kd', '{"n": "p2"}', dedupe_key => 'kp'));
SELECT pg_temp.holder('kp') AS key_holder, pg_temp.where_is(id) AS kept FROM enq WHERE k = 'p2';
RESET pgq.debug_clock_offset;
-- A dead job whose key a live job holds stays dead.
INSERT INTO enq VALUES ('a3', pgq.enqueue('kd', '{"n": "a3"}', dedupe_key => 'ka'));
SELECT pgq.retry_dead(id) AS revived_while_taken FROM enq WHERE k = 'a2';
SELECT pgq.retry_dead_job(id) AS outcome FROM enq WHERE k = 'a2';

-- ---- Cancel: pending on the ring, and running ------------------------------
INSERT INTO enq VALUES ('c1', pgq.enqueue('kd', '{"n": "c1"}', dedupe_key => 'kc1'));
SELECT pgq.cancel(id) AS cancelled, pg_temp.holder('kc1') AS key_holder FROM enq WHERE k = 'c1';
SELECT reason, dedupe_key FROM pgq.dead_jobs d JOIN enq e ON e.id = d.id WHERE e.k = 'c1';
SELECT count(*) AS drained FROM (SELECT pgq.complete(id, attempt) FROM pgq.claim('kd', 10)) c;
INSERT INTO enq VALUES ('c2', pgq.enqueue('kd', '{"n": "c2"}', dedupe_key => 'kc2'));
SELECT id = (SELECT id FROM enq WHERE k = 'c2') AS claimed_c2 FROM pgq.claim('kd');
SELECT pgq.cancel(id) AS cancelled_running, pg_temp.holder('kc2') AS key_holder
  FROM enq WHERE k = 'c2';

-- ---- complete_many, release, and an ended lease ---------------------------
INSERT INTO enq VALUES ('m1', pgq.enqueue('kd', '{"n": "m1"}', dedupe_key => 'km1'));
INSERT INTO enq VALUES ('m2', pgq.enqueue('kd', '{"n": "m2"}', dedupe_key => 'km2'));
SELECT pgq.complete_many(array_agg(id), array_agg(attempt)) AS completed FROM pgq.claim('kd', 2);
SELECT pg_temp.holder('km1') AS m1_key, pg_temp.holder('km2') AS m2_key;
INSERT INTO enq VALUES ('r1', pgq.enqueue('kd', '{"n": "r1"}', dedupe_key => 'kr1'));
SELECT pgq.release(id, attempt) AS released FROM pgq.claim('kd');
SELECT pg_temp.where_is(id) AS kept, pg_temp.holder('kr1') AS key_holder FROM enq WHERE k = 'r1';
SELECT pgq.complete(id, attempt) AS done FROM pgq.claim('kd');
INSERT INTO enq VALUES ('e1', pgq.enqueue('kd', '{"n": "e1"}', dedupe_key => 'ke1'));
SELECT count(*) AS claimed FROM pgq.claim('kd');
SET pgq.debug_clock_offset = '2min';
SELECT expired_requeued FROM pgq.maintain();
SELECT pg_temp.where_is(id) AS kept, pg_temp.holder('ke1') AS key_holder FROM enq WHERE k = 'e1';
SELECT count(*) AS claimed FROM pgq.claim('kd');
SET pgq.debug_clock_offset = '4min';
SELECT expired_dead FROM pgq.maintain();
RESET pgq.debug_clock_offset;
SELECT pg_temp.holder('ke1') AS key_holder_after_death;

-- ---- on_duplicate => 'replace' --------------------------------------------
-- Its holder pending on the ring: taken out of the ring and replaced as a
-- row under its id (one job runs, with the new payload).
SELECT pgq.create_queue('kr');
INSERT INTO enq VALUES ('v1', pgq.enqueue('kr', '{"v": 1}', dedupe_key => 'sat'));
SELECT pg_temp.where_is(id) AS kept FROM enq WHERE k = 'v1';
SELECT pgq.enqueue('kr', '{"v": 2}', dedupe_key => 'sat', on_duplicate => 'replace') = id AS replaced
  FROM enq WHERE k = 'v1';
SELECT pg_temp.where_is(id) AS kept, pg_temp.holder('sat') AS key_holder FROM enq WHERE k = 'v1';
SELECT outcome FROM pgq.job_log l JOIN enq e ON e.id = l.id WHERE e.k = 'v1' AND l.kind = 'c';
SELECT id = (SELECT id FROM enq WHERE k = 'v1') AS same_job, payload FROM pgq.claim('kr', 5);
-- A replaced ring holder with a child: the row it became has the child's
-- mark, and its completion lets the child go.
SELECT pgq.create_queue('kx');
INSERT INTO enq VALUES ('x1', pgq.enqueue('kx', '{"v": 1}', dedupe_key => 'x'));
INSERT INTO enq VALUES ('xc', pgq.enqueue('kx', '{"v": "child"}',
                                          after => ARRAY[(SELECT id FROM enq WHERE k = 'x1')]));
SELECT pgq.enqueue('kx', '{"v": 2}', dedupe_key => 'x', on_duplicate => 'replace') = id AS replaced
  FROM enq WHERE k = 'x1';
SELECT j.has_dependents FROM pgq.job_rows j JOIN enq e ON e.id = j.id WHERE e.k = 'x1';
SELECT pgq.complete(id, attempt) AS done, payload FROM pgq.claim('kx');
SELECT state FROM pgq.job((SELECT id FROM enq WHERE k = 'xc'));
-- The queue replaces holders now: its new jobs with a key stay rows, where
-- a replace finds a pending holder by its index.
SELECT dedupe_replaces FROM pgq.queues WHERE name = 'kr';
INSERT INTO enq VALUES ('v3', pgq.enqueue('kr', '{"v": 3}', dedupe_key => 'other'));
SELECT pg_temp.where_is(id) AS kept FROM enq WHERE k = 'v3';
-- Its row holder running: a replace makes a follower (the ring not read).
SELECT id = (SELECT id FROM enq WHERE k = 'v3') AS claimed_v3 FROM pgq.claim('kr');
INSERT INTO enq VALUES ('v4', pgq.enqueue('kr', '{"v": 4}', dedupe_key => 'other',
                                          on_duplicate => 'replace'));
SELECT pg_temp.holder('other') AS key_holder,
       (SELECT count(*) FROM pgq.dedupe_followers WHERE dedupe_key = 'other') AS followers;
-- Its holder running on the ring: the new job follows it, and takes the
-- key when it completes.
INSERT INTO enq VALUES ('f0', pgq.enqueue('kd', '{"n": "f0"}', dedupe_key => 'kf'));
SELECT id = (SELECT id FROM enq WHERE k = 'f0') AS claimed_f0 FROM pgq.claim('kd');
INSERT INTO enq VALUES ('f1', pgq.enqueue('kd', '{"n": "f1"}', dedupe_key => 'kf', on_duplicate => 'replace'));
SELECT pg_temp.holder('kf') AS key_holder,
       (SELECT count(*) FROM pgq.dedupe_followers WHERE dedupe_key = 'kf') AS followers;
SELECT pgq.complete(id, 1) AS done FROM enq WHERE k = 'f0';
SELECT pg_temp.holder('kf') AS key_holder, pg_temp.where_is(id) AS kept,
       (SELECT count(*) FROM pgq.dedupe_followers WHERE dedupe_key = 'kf') AS followers
  FROM enq WHERE k = 'f1';

-- ---- drop_queue drops its keys --------------------------------------------
SELECT count(*) > 0 AS some_keys FROM pgq.dedupe_holds h JOIN pgq.queues q USING (queue_id)
 WHERE q.name = 'kr';
SELECT pgq.drop_queue('kr', force => true);
SELECT count(*) AS keys_of_dropped FROM pgq.dedupe_holds h
 WHERE NOT EXISTS (SELECT FROM pgq.queues q WHERE q.queue_id = h.queue_id);

DROP EXTENSION pgq_cpp;
