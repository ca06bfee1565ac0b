-- enqueue's dedupe_for (a key taken for a period after its job finished)
-- and on_duplicate => 'replace' (debounce; a follower behind a running
-- holder).
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('orbits', max_attempts => 1);

CREATE FUNCTION pg_temp.error_of(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE sql;
  RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;

-- "At most once every 5 minutes": the key stays taken after the job is done.
SELECT pgq.enqueue('orbits', '{"sat": 25544}', dedupe_key => 'tle:25544',
                   dedupe_for => '5 minutes') AS d1 \gset
SELECT pgq.claim('orbits') IS NOT NULL;
SELECT pgq.complete(:d1, 1);
SELECT pgq.enqueue('orbits', '{"sat": 25544}', dedupe_key => 'tle:25544') = :d1 AS same_job_within_period;
SELECT count(*) AS live_jobs FROM pgq.jobs;
SET pgq.debug_clock_offset = '6min';
SELECT pgq.enqueue('orbits', '{"sat": 25544}', dedupe_key => 'tle:25544') AS d2 \gset
SELECT :d2 <> :d1 AS new_job_after_period;
RESET pgq.debug_clock_offset;
-- Without dedupe_for the key is free once the job finished, as in 1.1.
SELECT pgq.enqueue('orbits', '{}', dedupe_key => 'free') AS f1 \gset
SELECT pgq.cancel(:f1);
SELECT pgq.enqueue('orbits', '{}', dedupe_key => 'free') <> :f1 AS free_again;
-- A dead job holds its key for the period too.
SELECT pgq.enqueue('orbits', '{}', dedupe_key => 'dies', dedupe_for => '1 hour') AS x1 \gset
SELECT pgq.claim('orbits', 5) IS NOT NULL;
SELECT pgq.fail(:x1, 1, 'boom');
SELECT pgq.enqueue('orbits', '{}', dedupe_key => 'dies') = :x1 AS held_by_dead_job;
-- (pgq.dedupe_holds names every key's holder: 'free' is held by its live job.)
SELECT dedupe_key, job_id = :x1 AS by_x1, held_until IS NULL AS live
  FROM pgq.dedupe_holds ORDER BY dedupe_key;
-- Maintenance drops holds once past.
SET pgq.debug_clock_offset = '2h';
SELECT 1 FROM pgq.maintain();
SELECT count(*) AS holds_left FROM pgq.dedupe_holds;
RESET pgq.debug_clock_offset;
-- A dead job brought back keeps its dedupe period.
SELECT pgq.retry_dead(:x1) AS revived;
SELECT dedupe_key, dedupe_for FROM pgq.jobs WHERE id = :x1;

-- Debounce: every event replaces the waiting job's payload, run_at and
-- priority; one job runs.
SELECT pgq.create_queue('predict');
SELECT pgq.enqueue('predict', '{"v": 1}', run_at => pgq.clock() + interval '5 seconds',
                   dedupe_key => 'sat:1', on_duplicate => 'replace') AS r1 \gset
SELECT pgq.enqueue('predict', '{"v": 2}', run_at => pgq.clock() + interval '5 seconds',
                   priority => 3, dedupe_key => 'sat:1', on_duplicate => 'replace') = :r1 AS replaced;
SELECT payload, priority, state FROM pgq.job(:r1);
SELECT pgq.enqueue('predict', '{"v": 3}', dedupe_key => 'sat:1') = :r1 AS ignore_returns_holder;
SELECT payload FROM pgq.job(:r1);
-- Its holder running: the new job waits behind it, and later events
-- replace that follower; when the holder finishes the follower takes the key.
SET pgq.debug_clock_offset = '10s';
SELECT id = :r1 AS holder_claimed, attempt FROM pgq.claim('predict');
SELECT pgq.enqueue('predict', '{"v": 4}', dedupe_key => 'sat:1', on_duplicate => 'replace') AS r2 \gset
SELECT pgq.enqueue('predict', '{"v": 5}', dedupe_key => 'sat:1', on_duplicate => 'replace') = :r2 AS follower_replaced;
SELECT id = :r1 AS is_r1, state, dedupe_key, payload FROM pgq.list_jobs('predict') ORDER BY id;
SELECT count(*) AS follower_not_claimable FROM pgq.claim('predict');
SELECT pgq.complete(:r1, 1);
SELECT state, dedupe_key, payload FROM pgq.job(:r2);
SELECT pgq.enqueue('predict', '{"v": 6}', dedupe_key => 'sat:1') = :r2 AS key_moved_to_follower;
-- The follower of a holder that dies or is cancelled moves on the same way.
SELECT id = :r2 AS follower_runs FROM pgq.claim('predict');
SELECT pgq.enqueue('predict', '{"v": 7}', dedupe_key => 'sat:1', on_duplicate => 'replace') AS r3 \gset
SELECT pgq.cancel(:r2);
SELECT state, payload FROM pgq.job(:r3);
-- A follower can be cancelled too: the holder's end then makes nothing
-- pending.
SELECT id = :r3 AS follower_runs FROM pgq.claim('predict');
SELECT pgq.enqueue('predict', '{"v": 8}', dedupe_key => 'sat:1', on_duplicate => 'replace') AS r4 \gset
SELECT state, payload FROM pgq.job(:r4);
SELECT pgq.cancel(:r4) AS follower_cancelled;
SELECT pgq.complete(:r3, 1);
SELECT state FROM pgq.job(:r4);
SELECT count(*) AS live_jobs FROM pgq.jobs j JOIN pgq.queues q USING (queue_id) WHERE q.name = 'predict';
RESET pgq.debug_clock_offset;

-- In a FIFO group: a follower of a running holder joins the group when the
-- holder finishes, in its enqueue order (before a job enqueued after it).
SELECT pgq.create_queue('chat');
SELECT pgq.enqueue('chat', '{"v": 1}', dedupe_key => 'sync:42', group_key => 'customer:42') AS g1 \gset
SELECT id = :g1 AS head_runs FROM pgq.claim('chat');
SELECT pgq.enqueue('chat', '{"v": 2}', dedupe_key => 'sync:42', group_key => 'customer:42',
                   on_duplicate => 'replace') AS g2 \gset
SELECT pgq.enqueue('chat', '{"v": 3}', group_key => 'customer:42') AS g3 \gset
SELECT pgq.enqueue('chat', '{"v": 4}', dedupe_key => 'sync:42', group_key => 'customer:42',
                   on_duplicate => 'replace') = :g2 AS follower_replaced;
SELECT payload->>'v' AS v, state FROM pgq.list_jobs('chat') ORDER BY id;
SELECT pgq.complete(:g1, 1);
SELECT payload->>'v' AS v, state FROM pgq.list_jobs('chat') ORDER BY id;
SELECT id = :g2 AS follower_is_next, payload FROM pgq.claim('chat');

-- A holder whose lease expired is pending, and its old claim could still
-- complete it late (the work was done): not once it was replaced, since it
-- now carries work nobody did.
SELECT pgq.create_queue('late', lease => '1 minute');
SELECT pgq.enqueue('late', '{"v": 1}', dedupe_key => 'x') AS l1 \gset
SELECT attempt FROM pgq.claim('late');
SET pgq.debug_clock_offset = '2min';
SELECT expired_requeued FROM pgq.maintain();
SELECT pgq.enqueue('late', '{"v": 2}', dedupe_key => 'x', on_duplicate => 'replace') = :l1 AS replaced;
SELECT pgq.complete(:l1, 1) AS late_complete;
SELECT state, payload FROM pgq.job(:l1);
RESET pgq.debug_clock_offset;

-- A holder waiting for its parents (after) has not started either: it is
-- replaced and keeps its parents (issue 30, D3; 2.0 retried 8 times and
-- raised 40001, which clients retry for ever). A replacing enqueue behind a
-- group's head, and one whose holder waits in its group, are answered too.
SELECT pgq.create_queue('parents');
SELECT pgq.enqueue('parents', '{"parent": 1}') AS p1 \gset
SELECT pgq.enqueue('predict', '{"v": 10}', dedupe_key => 'child', after => ARRAY[:p1]) AS c1 \gset
SELECT pgq.enqueue('predict', '{"v": 11}', priority => 7, run_at => '2030-01-01',
                   dedupe_key => 'child', on_duplicate => 'replace') = :c1 AS replaced;
SELECT state, open_parents, priority, run_at = '2030-01-01' AS new_run_at, payload
  FROM pgq.job(:c1);
SELECT count(*) AS one_job FROM pgq.jobs WHERE dedupe_key = 'child';
SELECT pgq.enqueue('predict', '{"v": 12}', run_at => now(), dedupe_key => 'child',
                   on_duplicate => 'replace') = :c1 AS replaced_again;
SELECT pgq.complete(id, attempt) FROM pgq.claim('parents');
SELECT state, payload FROM pgq.job(:c1);
SELECT pgq.enqueue('chat', '{"v": 20}', group_key => 'bob') AS head \gset
SELECT pgq.enqueue('chat', '{"v": 21}', group_key => 'bob', dedupe_key => 'b2') AS behind \gset
SELECT pgq.enqueue('chat', '{"v": 22}', group_key => 'bob', dedupe_key => 'b2',
                   on_duplicate => 'replace') = :behind AS replaced_behind_head;
SELECT state, payload FROM pgq.job(:behind);

-- Bad input.
SELECT s AS statement, pg_temp.error_of(s) AS error FROM (VALUES
  ($$SELECT pgq.enqueue('predict', '{}', dedupe_key => 'k', on_duplicate => 'merge')$$),
  ($$SELECT pgq.enqueue('predict', '{}', dedupe_key => 'k', on_duplicate => NULL)$$),
  ($$SELECT pgq.enqueue('predict', '{}', on_duplicate => 'replace')$$),
  ($$SELECT pgq.enqueue('predict', '{}', dedupe_for => '1 minute')$$),
  ($$SELECT pgq.enqueue('predict', '{}', dedupe_key => 'k', dedupe_for => '-1 minute')$$),
  ($$SELECT pgq.enqueue('predict', '{}', dedupe_key => 'k', dedupe_for => '101 years')$$)
) AS t(s);
SELECT count(*) AS nothing_half_written FROM pgq.jobs WHERE dedupe_key = 'k';

DROP EXTENSION pgq_cpp;
