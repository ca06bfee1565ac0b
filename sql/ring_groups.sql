-- Grouped jobs on the rings (issue 33, ADR 0028 "Groups on the rings"). A
-- job whose FIFO group has room when it is enqueued (nothing of its group
-- pending, running or waiting, or fewer than group_concurrency) goes on its
-- queue's ring like a plain job, counted in its group by a row of
-- pgq.group_holds; a job that must wait for its group waits in pgq.job_rows
-- and is promoted there, in place, so that it is claimed in SPEC order
-- (its run_at is its enqueue's). Every way a grouped ring job leaves the
-- ring lets its group go on: done (one or many), failed into dead-letter or
-- back into pgq.job_rows for its retry, released, snoozed, cancelled
-- pending or running, its lease expired.
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('rg', lease => '1 hour');
CREATE TEMP TABLE enq (k text PRIMARY KEY, id bigint NOT NULL UNIQUE);
CREATE FUNCTION pg_temp.job(bigint) RETURNS text LANGUAGE sql AS 'SELECT k FROM enq WHERE id = $1';
CREATE FUNCTION pg_temp.put(q text, k text, g text) RETURNS void LANGUAGE sql
  AS $$INSERT INTO enq VALUES ($2, pgq.enqueue($1, jsonb_build_object('k', $2), group_key => $3))$$;
CREATE FUNCTION pg_temp.id(text) RETURNS bigint LANGUAGE sql AS 'SELECT id FROM enq WHERE k = $1';
-- Where each job is: on a ring, or a row of pgq.job_rows (and its state).
CREATE FUNCTION pg_temp.where_jobs() RETURNS TABLE (job text, place text, state "char", group_key text)
  LANGUAGE sql AS $$
  SELECT pg_temp.job(r.id), 'ring', r.state, r.group_key FROM pgq.ring_jobs r
  UNION ALL
  SELECT pg_temp.job(j.id), 'rows', j.state, j.group_key FROM pgq.job_rows j
  ORDER BY 1$$;
CREATE FUNCTION pg_temp.holds() RETURNS TABLE (job text, group_key text)
  LANGUAGE sql AS 'SELECT pg_temp.job(job_id), group_key FROM pgq.group_holds ORDER BY 1';
CREATE FUNCTION pg_temp.claim(q text, n int) RETURNS TABLE (job text, attempt int)
  LANGUAGE sql AS 'SELECT pg_temp.job(id), attempt FROM pgq.claim($1, $2)';

-- A group with room: its job goes on the ring, held; the next of the group
-- waits as a row, as does a job of a group whose head waits as a row.
SELECT pg_temp.put('rg', 'a1', 'A'), pg_temp.put('rg', 'a2', 'A'), pg_temp.put('rg', 'b1', 'B');
SELECT * FROM pg_temp.where_jobs();
SELECT * FROM pg_temp.holds();
-- Every reader shows a ring job's group.
SELECT pg_temp.job(id) AS job, group_key FROM pgq.jobs ORDER BY id;
SELECT group_key FROM pgq.job(pg_temp.id('a1'));
SELECT pg_temp.job(id) AS job, group_key FROM pgq.list_jobs('rg') ORDER BY id;

-- One at a time per group, in enqueue order: a2 only once a1 is done.
SELECT * FROM pg_temp.claim('rg', 10);
SELECT * FROM pg_temp.claim('rg', 10);
SELECT pgq.complete(pg_temp.id('a1'), 1);
SELECT * FROM pg_temp.holds();
SELECT * FROM pg_temp.where_jobs();
-- The promoted job is claimed before a later plain job (SPEC order: its
-- run_at is its enqueue's).
SELECT pg_temp.put('rg', 'p1', NULL);
SELECT * FROM pg_temp.claim('rg', 1);
SELECT pgq.complete(pg_temp.id('a2'), 1), pgq.complete(pg_temp.id('b1'), 1);
SELECT * FROM pg_temp.claim('rg', 10);
SELECT pgq.complete(pg_temp.id('p1'), 1);
-- Its group idle again: the next job of A goes on the ring.
SELECT pg_temp.put('rg', 'a3', 'A');
SELECT * FROM pg_temp.where_jobs();
SELECT * FROM pg_temp.holds();

-- complete_many lets every group go on.
SELECT pg_temp.put('rg', 'c1', 'C'), pg_temp.put('rg', 'c2', 'C'), pg_temp.put('rg', 'd1', 'D'),
       pg_temp.put('rg', 'd2', 'D');
SELECT * FROM pg_temp.claim('rg', 10);
SELECT pgq.complete_many(ARRAY[pg_temp.id('a3'), pg_temp.id('c1'), pg_temp.id('d1')],
                         ARRAY[1, 1, 1]) AS completed;
SELECT * FROM pg_temp.holds();
SELECT * FROM pg_temp.claim('rg', 10);
SELECT pgq.complete_many(ARRAY[pg_temp.id('c2'), pg_temp.id('d2')], ARRAY[1, 1]) AS completed;

-- A failure with a retry later: the head goes back into pgq.job_rows (its
-- row holds the group now: the next job still waits), with its group.
SELECT pg_temp.put('rg', 'e1', 'E'), pg_temp.put('rg', 'e2', 'E');
SELECT * FROM pg_temp.claim('rg', 10);
SELECT pgq.fail(pg_temp.id('e1'), 1, 'boom', retry_in => '1 hour');
SELECT * FROM pg_temp.where_jobs();
SELECT * FROM pg_temp.holds();
SELECT count(*) AS nothing_ready FROM pgq.claim('rg', 10);
-- Cancelled in its row, the group moves on.
SELECT pgq.cancel(pg_temp.id('e1'));
SELECT * FROM pg_temp.where_jobs();
SELECT * FROM pg_temp.claim('rg', 10);
SELECT pgq.complete(pg_temp.id('e2'), 1);

-- Into dead-letter (attempts spent): the group moves on, and the dead row
-- keeps its group (retry_dead puts it back in line).
SELECT pgq.create_queue('rg1', max_attempts => 1, lease => '1 hour');
SELECT pg_temp.put('rg1', 'f1', 'F'), pg_temp.put('rg1', 'f2', 'F');
SELECT * FROM pg_temp.claim('rg1', 10);
SELECT pgq.fail(pg_temp.id('f1'), 1, 'boom');
SELECT pg_temp.job(id) AS job, reason, group_key FROM pgq.dead_jobs ORDER BY id;
SELECT * FROM pg_temp.holds();
SELECT * FROM pg_temp.where_jobs();
SELECT * FROM pg_temp.claim('rg1', 10);
SELECT pgq.complete(pg_temp.id('f2'), 1);

-- Released and snoozed: back into pgq.job_rows as the group's head.
SELECT pg_temp.put('rg', 'g1', 'G'), pg_temp.put('rg', 'g2', 'G');
SELECT * FROM pg_temp.claim('rg', 10);
SELECT pgq.release(pg_temp.id('g1'), 1);
SELECT * FROM pg_temp.where_jobs();
SELECT pgq.cancel(pg_temp.id('g1')), pgq.cancel(pg_temp.id('g2'));
SELECT pg_temp.put('rg', 's1', 'S'), pg_temp.put('rg', 's2', 'S');
SELECT * FROM pg_temp.claim('rg', 10);
SELECT pgq.snooze(pg_temp.id('s1'), 1, '1 hour');
SELECT * FROM pg_temp.where_jobs();
SELECT * FROM pg_temp.holds();
SELECT count(*) AS nothing_ready FROM pgq.claim('rg', 10);
SELECT pgq.cancel(pg_temp.id('s1')), pgq.cancel(pg_temp.id('s2'));

-- Cancelled while pending on the ring, and while running: the group moves
-- on each time; the dead rows keep the group.
SELECT pg_temp.put('rg', 'h1', 'H'), pg_temp.put('rg', 'h2', 'H'), pg_temp.put('rg', 'h3', 'H');
SELECT pgq.cancel(pg_temp.id('h1'));
SELECT * FROM pg_temp.where_jobs();
SELECT * FROM pg_temp.claim('rg', 10);
SELECT pgq.cancel(pg_temp.id('h2'));
SELECT * FROM pg_temp.where_jobs();
SELECT pg_temp.job(id) AS job, reason, group_key FROM pgq.dead_jobs
 WHERE queue = 'rg' ORDER BY id;
SELECT * FROM pg_temp.claim('rg', 10);
SELECT pgq.complete(pg_temp.id('h3'), 1);
SELECT * FROM pg_temp.holds();

-- A lease that ends: the job goes back into pgq.job_rows as its group's
-- head (then the next waits), or, its attempts spent, into dead-letter
-- (then the next moves on).
SELECT pgq.create_queue('rgx', max_attempts => 2, lease => '1 hour');
SELECT pg_temp.put('rgx', 'x1', 'X'), pg_temp.put('rgx', 'x2', 'X');
SELECT pg_temp.job(id) AS job, attempt FROM pgq.claim('rgx', 10, lease => '1 millisecond');
SELECT pg_sleep(0.01);
SELECT expired_requeued, expired_dead FROM pgq.maintain();
SELECT * FROM pg_temp.where_jobs() WHERE job LIKE 'x%';
SELECT * FROM pg_temp.holds();
SELECT pg_temp.job(id) AS job, attempt FROM pgq.claim('rgx', 10, lease => '1 millisecond');
SELECT pg_sleep(0.01);
SELECT expired_requeued, expired_dead FROM pgq.maintain();
SELECT * FROM pg_temp.where_jobs() WHERE job LIKE 'x%';
SELECT * FROM pg_temp.claim('rgx', 10);
SELECT pgq.complete(pg_temp.id('x2'), 1);

-- group_concurrency 2: two of a group on the ring at once, the third waits
-- and follows the first to end.
SELECT pgq.create_queue('rg2', group_concurrency => 2, lease => '1 hour');
SELECT pg_temp.put('rg2', 'm1', 'M'), pg_temp.put('rg2', 'm2', 'M'), pg_temp.put('rg2', 'm3', 'M');
SELECT * FROM pg_temp.where_jobs() WHERE job LIKE 'm%';
SELECT * FROM pg_temp.claim('rg2', 10);
SELECT pgq.complete(pg_temp.id('m2'), 1);
SELECT * FROM pg_temp.claim('rg2', 10);
SELECT pgq.complete(pg_temp.id('m1'), 1), pgq.complete(pg_temp.id('m3'), 1);

-- A queue that keeps its completed jobs: the history row has the group.
SELECT pgq.create_queue('rgh', keep_completed => '1 hour');
SELECT pg_temp.put('rgh', 'k1', 'K');
SELECT * FROM pg_temp.claim('rgh', 1);
SELECT pgq.complete(pg_temp.id('k1'), 1);
SELECT state, group_key FROM pgq.job(pg_temp.id('k1'));

-- A claim finds what its own transaction made pending, even after the
-- queue's claim hint said nothing was (it learns of them at commit): a job
-- enqueued as a row, and a group's next job its head's completion promoted.
SELECT pgq.create_queue('own', lease => '1 hour');
SELECT count(*) AS nothing_yet FROM pgq.claim('own', 1);
BEGIN;
INSERT INTO enq VALUES ('o0', pgq.enqueue('own', '{}', dedupe_key => 'once'));
SELECT * FROM pg_temp.claim('own', 10);
COMMIT;
SELECT pg_temp.put('own', 'o1', 'O'), pg_temp.put('own', 'o2', 'O');
SELECT * FROM pg_temp.claim('own', 10);
BEGIN;
SELECT pgq.complete(pg_temp.id('o1'), 1);
SELECT * FROM pg_temp.claim('own', 10);
COMMIT;
SELECT pgq.complete(pg_temp.id('o0'), 1), pgq.complete(pg_temp.id('o2'), 1);

-- Nothing left anywhere; dropping a queue drops its holds.
SELECT * FROM pg_temp.where_jobs();
SELECT * FROM pg_temp.holds();
SELECT pg_temp.put('rg', 'z1', 'Z');
SELECT count(*) AS holds FROM pgq.group_holds;
SELECT pgq.drop_queue('rg', force => true);
SELECT count(*) AS holds FROM pgq.group_holds;

-- enqueue_many with group keys counts each group's room once for the call
-- and keeps it as its jobs take it (issue 34): the same jobs pending and
-- waiting as one enqueue each would leave. Cap 2: a group with one job
-- already has room for one more; per-payload keys keep a room per group.
SELECT pgq.create_queue('rb', group_concurrency => 2);
SELECT pgq.enqueue('rb', '{"before": 1}', group_key => 'a') > 0 AS before;
SELECT count(*) FROM pgq.enqueue_many('rb', array_fill('{}'::jsonb, ARRAY[3]), group_keys => ARRAY['a']);
SELECT count(*) FROM pgq.enqueue_many('rb', array_fill('{}'::jsonb, ARRAY[6]),
                                      group_keys => ARRAY['b', 'c', 'b', 'b', 'c', 'c']);
SELECT group_key, count(*) FILTER (WHERE state = 'ready') AS ready,
       count(*) FILTER (WHERE state = 'waiting') AS waiting
  FROM pgq.list_jobs('rb') GROUP BY group_key ORDER BY group_key;
-- The waiting ones move up as their group's jobs complete, none lost.
DO $$ DECLARE r record; BEGIN
  FOR i IN 1 .. 20 LOOP
    FOR r IN SELECT * FROM pgq.claim('rb', 10) LOOP PERFORM pgq.complete(r.id, r.attempt); END LOOP;
  END LOOP;
END $$;
SELECT count(*) AS left_over FROM pgq.list_jobs('rb') WHERE state IN ('ready', 'waiting', 'running');
SELECT pgq.drop_queue('rb', force => true);

-- Scheduled grouped jobs stay rows of pgq.job_rows until due: a batch's
-- group room counted once (store::GroupRoom), as for the ring's; the
-- group's first group_concurrency jobs pending, the rest waiting, in
-- enqueue order, with a FIFO group (1) and a shared one (2); a single
-- enqueue behind them waits.
SELECT pgq.create_queue('rs', lease => '1 hour', group_concurrency => 2);
SELECT count(*) AS enqueued FROM pgq.enqueue_many('rs', array_fill('{}'::jsonb, ARRAY[5]),
         run_at => now() + interval '1 hour', group_keys => ARRAY['t']);
SELECT pgq.enqueue('rs', '{}', run_at => now() + interval '1 hour', group_key => 't') > 0 AS one_more;
SELECT string_agg(state::text, '' ORDER BY id) AS states FROM pgq.job_rows
 WHERE queue_id = (SELECT queue_id FROM pgq.queues WHERE name = 'rs');
SELECT pgq.create_queue('rf', lease => '1 hour');
SELECT count(*) AS enqueued FROM pgq.enqueue_many('rf', array_fill('{}'::jsonb, ARRAY[3]),
         run_at => now() + interval '1 hour', group_keys => ARRAY['t']);
SELECT string_agg(state::text, '' ORDER BY id) AS states FROM pgq.job_rows
 WHERE queue_id = (SELECT queue_id FROM pgq.queues WHERE name = 'rf');
DROP EXTENSION pgq_cpp;
