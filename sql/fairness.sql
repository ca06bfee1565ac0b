-- Fair share across group keys (issue 34, SPEC §12, ADR 0029): a queue
-- with fairness => 'group' hands out its ready jobs across the group keys
-- that have some, one turn each, in the order of each key's jobs.
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('fq', lease => '1 hour', group_concurrency => 10000, fairness => 'group');
SELECT queue_name, fairness FROM pgq.queue_settings('fq');

-- Bad values: 22023, nothing changed.
\set VERBOSITY sqlstate
SELECT pgq.create_queue('fx', fairness => 'round-robin');
SELECT pgq.alter_queue('fq', fairness => 'bogus');
SELECT pgq.alter_queue('fq', fairness => '');
\set VERBOSITY default
SELECT queue_name, fairness FROM pgq.queue_settings('fq');
SELECT count(*) AS fx FROM pgq.queue_settings() WHERE queue_name = 'fx';

-- n jobs of key k, payloads {"k": k, "i": 1..n}, in one call.
CREATE FUNCTION pg_temp.put(q text, k text, n int) RETURNS bigint LANGUAGE sql AS $$
  SELECT count(*) FROM pgq.enqueue_many($1,
    (SELECT array_agg(jsonb_build_object('k', $2, 'i', i) ORDER BY i) FROM generate_series(1, $3) i),
    group_keys => ARRAY[$2])$$;
-- The claims made so far, in order.
CREATE TEMP TABLE served (n serial PRIMARY KEY, k text, i int, id bigint);
-- `rounds` claims of n jobs, each completed before the next claim; the keys
-- taken, in order.
CREATE FUNCTION pg_temp.take(q text, n int, rounds int) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  r record;
  keys text := '';
BEGIN
  FOR round IN 1 .. rounds LOOP
    FOR r IN SELECT * FROM pgq.claim(q, n) LOOP
      INSERT INTO served (k, i, id) VALUES (r.payload->>'k', (r.payload->>'i')::int, r.id);
      keys := keys || (r.payload->>'k');
      PERFORM pgq.complete(r.id, r.attempt);
    END LOOP;
  END LOOP;
  RETURN keys;
END $$;

-- The issue's shape, scaled: a tenant's import of 300 jobs, then 30 and 5
-- of two others. Each key in turn while it has jobs; within a key, in
-- enqueue order.
SELECT pg_temp.put('fq', 'A', 300), pg_temp.put('fq', 'B', 30), pg_temp.put('fq', 'C', 5);
SELECT pg_temp.take('fq', 1, 45) AS keys;
-- A claim of ten takes ten turns.
SELECT pg_temp.take('fq', 10, 2) AS keys;

-- A job of an idle key is claimed within one round: before any key that
-- has jobs is served twice.
SELECT pg_temp.put('fq', 'D', 1);
SELECT pg_temp.take('fq', 1, 2) AS keys;

-- Cancelled while pending: an early job of A (among its filed offers) and
-- a late one (past what the lane keeps of A: read again by a sweep) are
-- never handed out.
SELECT pgq.cancel(id) AS early FROM pgq.jobs
 WHERE queue_id = (SELECT queue_id FROM pgq.queues WHERE name = 'fq') AND (payload->>'i')::int = 60
   AND group_key = 'A';
SELECT pgq.cancel(id) AS late FROM pgq.jobs
 WHERE queue_id = (SELECT queue_id FROM pgq.queues WHERE name = 'fq') AND (payload->>'i')::int = 250
   AND group_key = 'A';

-- A claim that rolls back gives its job back: the next claim takes it.
BEGIN;
SELECT id AS rolled_id FROM pgq.claim('fq', 1) \gset
ROLLBACK;
SELECT pg_temp.take('fq', 1, 1) AS keys;
SELECT id = :rolled_id AS same_job FROM served ORDER BY n DESC LIMIT 1;

-- Fairness off while jobs wait: what the lane holds is handed out, then
-- the rest in the order they came; every job once.
SELECT pgq.alter_queue('fq', fairness => 'none');
SELECT queue_name, fairness FROM pgq.queue_settings('fq');
SELECT length(pg_temp.take('fq', 50, 10)) AS taken;
SELECT count(*) AS left_over FROM pgq.jobs
 WHERE queue_id = (SELECT queue_id FROM pgq.queues WHERE name = 'fq');
-- Every job served once, in its key's order, but the two cancelled.
SELECT k, count(*) AS served, count(DISTINCT i) AS distinct_jobs,
       bool_and(i > prev OR prev IS NULL) AS in_order,
       count(*) FILTER (WHERE i IN (60, 250)) AS cancelled_served
  FROM (SELECT k, i, lag(i) OVER (PARTITION BY k ORDER BY n) AS prev FROM served) s
 GROUP BY k ORDER BY k;

-- On again, on a queue with jobs already waiting behind the cursor's
-- place: the lane files from where its cursor is.
SELECT pgq.alter_queue('fq', fairness => 'group');
SELECT pg_temp.put('fq', 'E', 4), pg_temp.put('fq', 'F', 2);
SELECT pg_temp.take('fq', 1, 6) AS keys;

-- Weights (pgq.set_group_weight): a key of weight 3 gets three turns for
-- each turn of a key of weight 1; readable by the queue's roles.
SELECT pgq.create_queue('wq', lease => '1 hour', group_concurrency => 10000, fairness => 'group');
SELECT pgq.set_group_weight('wq', 'W', 3);
SELECT pgq.set_group_weight('wq', 'X', 1);  -- the default: nothing kept
SELECT * FROM pgq.group_weights('wq');
SELECT pg_temp.put('wq', 'W', 100), pg_temp.put('wq', 'X', 100), pg_temp.put('wq', 'Y', 100);
SELECT pg_temp.take('wq', 1, 30) AS keys;
SELECT k, count(*) FROM (SELECT k FROM served ORDER BY n DESC LIMIT 30) s GROUP BY k ORDER BY k;
-- Changed while jobs wait: the next turns follow it.
SELECT pgq.set_group_weight('wq', 'W', NULL);
SELECT * FROM pgq.group_weights('wq');
SELECT pg_temp.take('wq', 1, 12) AS keys;
\set VERBOSITY sqlstate
SELECT pgq.set_group_weight('wq', 'W', 0);
SELECT pgq.set_group_weight('wq', 'W', 1001);
SELECT pgq.set_group_weight('wq', '', 2);
SELECT pgq.set_group_weight('wq', NULL, 2);
SELECT pgq.set_group_weight('nosuch', 'W', 2);
SELECT * FROM pgq.group_weights('nosuch');
\set VERBOSITY default

-- rate_limit_per_key: at most that many jobs a second start per key,
-- across every worker (a start not made is never saved up). The clock is
-- moved by pgq.debug_clock_offset.
SELECT pgq.create_queue('rq', lease => '1 hour', group_concurrency => 10000,
                        rate_limit_per_key => 0.1);
SELECT queue_name, fairness, rate_limit_per_key FROM pgq.queue_settings('rq');
SELECT pg_temp.put('rq', 'R', 10), pg_temp.put('rq', 'S', 10);
-- One start each now (R, S), none more in the next ten seconds.
SELECT pg_temp.take('rq', 10, 3) AS keys;
SET pgq.debug_clock_offset = '5s';
SELECT pg_temp.take('rq', 10, 1) AS keys;
SET pgq.debug_clock_offset = '10s';
SELECT pg_temp.take('rq', 10, 1) AS keys;
-- A minute later: one start each, not five (none saved up).
SET pgq.debug_clock_offset = '70s';
SELECT pg_temp.take('rq', 10, 2) AS keys;
RESET pgq.debug_clock_offset;
-- Removed: the rest at once (the jobs' turns still fair).
SELECT pgq.alter_queue('rq', rate_limit_per_key => 0);
SELECT pg_temp.take('rq', 100, 1) AS keys;
\set VERBOSITY sqlstate
SELECT pgq.alter_queue('rq', rate_limit_per_key => -1);
SELECT pgq.create_queue('rx', rate_limit_per_key => 'NaN');
\set VERBOSITY default

-- What the lane holds of the busiest keys (pgq.fair_keys): U's import of
-- 100 beside V's 3, after 4 claims.
SELECT pgq.create_queue('mq', lease => '1 hour', group_concurrency => 10000, fairness => 'group');
SELECT pgq.set_group_weight('mq', 'U', 2);
SELECT pg_temp.put('mq', 'U', 100), pg_temp.put('mq', 'V', 3);
SELECT pg_temp.take('mq', 1, 4) AS keys;
SELECT group_key, weight, held, more, running, served, waiting >= '0' AS waiting
  FROM pgq.fair_keys('mq');
SELECT group_key FROM pgq.fair_keys('mq', 1);
-- Three more claimed, not completed: running per key.
SELECT count(*) AS claimed FROM pgq.claim('mq', 3);
SELECT group_key, running, served FROM pgq.fair_keys('mq');
SELECT count(*) AS unfair_keys FROM pgq.fair_keys('rq');
\set VERBOSITY sqlstate
SELECT * FROM pgq.fair_keys('mq', 0);
SELECT * FROM pgq.fair_keys('nosuch');
\set VERBOSITY default

-- A database's share of the server's fair orders
-- (pgq.max_fair_queues_per_database): past it, a fair queue hands out its
-- jobs in the order they came (and the server log says so), so that one
-- team's fair queues cannot leave another database's unfair.
SELECT count(pgq.drop_queue(name, force => true)) AS dropped FROM pgq.queues;
SET pgq.max_fair_queues_per_database = 1;
SELECT pgq.create_queue('f1', lease => '1 hour', group_concurrency => 100, fairness => 'group');
SELECT pgq.create_queue('f2', lease => '1 hour', group_concurrency => 100, fairness => 'group');
SELECT pg_temp.put('f1', 'A', 3), pg_temp.put('f1', 'B', 3);
SELECT pg_temp.put('f2', 'A', 3), pg_temp.put('f2', 'B', 3);
SELECT pg_temp.take('f1', 1, 2) AS f1_keys, pg_temp.take('f2', 1, 2) AS f2_keys;
-- f1 drained and its order given back: f2's next claim takes it.
SELECT length(pg_temp.take('f1', 10, 1)) AS f1_rest;
SELECT pg_temp.take('f2', 1, 4) AS f2_keys;
RESET pgq.max_fair_queues_per_database;

-- capped: a noisy tenant capped by group_concurrency (3: its backlog waits
-- in the table, let in one job at each of its completions) beside two quiet
-- tenants under the cap (their jobs on the ring): the table's jobs take
-- their key's turns (ADR 0029 "Rows"), so the three are served in turn, not
-- the noisy tenant's 37 table jobs first.
SELECT pgq.create_queue('fc', lease => '1 hour', group_concurrency => 3, fairness => 'group');
SELECT pg_temp.put('fc', 'N', 40);
SELECT pg_temp.put('fc', 'Q', 3);
SELECT pg_temp.put('fc', 'R', 3);
SELECT COALESCE(max(n), 0) AS before_fc FROM served \gset
SELECT pg_temp.take('fc', 1, 15) AS capped_keys;
-- The rest, every job once, each tenant's in its order.
SELECT length(pg_temp.take('fc', 1, 40)) AS rest;
SELECT k, count(*) AS jobs, count(DISTINCT id) AS once, bool_and(i = r) AS in_order
  FROM (SELECT k, i, id, row_number() OVER (PARTITION BY k ORDER BY n) AS r
          FROM served WHERE n > :before_fc) z
 GROUP BY k ORDER BY k;

-- Two noisy tenants capped (2), both backlogs in the table, the second
-- enqueued after the first, beside a quiet one: all three in turn (before
-- the table's rows took their turns, N's older rows always came first and
-- M waited for N's whole backlog), weights included.
SELECT pgq.create_queue('fd', lease => '1 hour', group_concurrency => 2, fairness => 'group');
SELECT pg_temp.put('fd', 'N', 30);
SELECT pg_temp.put('fd', 'M', 30);
SELECT pg_temp.put('fd', 'Q', 3);
SELECT COALESCE(max(n), 0) AS before_fd FROM served \gset
SELECT pg_temp.take('fd', 1, 15) AS two_capped;
-- pgq.fair_keys names the keys whose ready jobs are all rows of the table,
-- and counts their running rows.
BEGIN;
SELECT count(*) AS claimed FROM pgq.claim('fd', 2);
SELECT group_key, held, running FROM pgq.fair_keys('fd') ORDER BY group_key;
ROLLBACK;
SELECT pgq.set_group_weight('fd', 'M', 2);
SELECT pg_temp.take('fd', 1, 12) AS m_weighs_two;
SELECT length(pg_temp.take('fd', 5, 20)) AS rest;
SELECT k, count(*) AS jobs, count(DISTINCT id) AS once, bool_and(i = r) AS in_order
  FROM (SELECT k, i, id, row_number() OVER (PARTITION BY k ORDER BY n) AS r
          FROM served WHERE n > :before_fd) z
 GROUP BY k ORDER BY k;

DROP EXTENSION pgq_cpp;
