-- What a role may read about its own queues (3.0, issue 31): job_info's
-- dead_reason and list_jobs' reason filter, cancel_job and retry_dead_job
-- (why nothing happened), queue_settings, queue_workers,
-- list_schedule_runs, the coordination readers, job_dependencies,
-- find_jobs and stream_segments. Each right is tried:
-- produce, consume and admin on one queue, a role with a right on another
-- queue only, and one with none.
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('work', max_attempts => 1, lease => '1 minute', rate_limit => 50,
                        keep_completed => '1 hour', keep_dead => '7 days', max_running => 4,
                        group_concurrency => 2);
SELECT pgq.create_queue('other');
CREATE ROLE pgq_rs_producer;
CREATE ROLE pgq_rs_consumer;
CREATE ROLE pgq_rs_admin;
CREATE ROLE pgq_rs_elsewhere;  -- every right, on 'other' only
CREATE ROLE pgq_rs_nobody;
SELECT pgq.grant('pgq_rs_producer', 'work', 'produce'), pgq.grant('pgq_rs_consumer', 'work', 'consume'),
       pgq.grant('pgq_rs_admin', 'work', 'admin'), pgq.grant('pgq_rs_elsewhere', 'other', 'produce'),
       pgq.grant('pgq_rs_elsewhere', 'other', 'admin');

CREATE FUNCTION pg_temp.error_of(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE sql;
  RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;
GRANT EXECUTE ON FUNCTION pg_temp.error_of(text) TO PUBLIC;

-- ---- Dead reasons: one job per reason, one done, one live ------------------
-- exhausted: failed on its last attempt.
SELECT pgq.enqueue('work', '{"n": "exhausted"}') AS exhausted \gset
SELECT pgq.fail(id, attempt, 'boom') FROM pgq.claim('work');
-- cancelled.
SELECT pgq.enqueue('work', '{"n": "cancelled"}') AS cancelled \gset
SELECT pgq.cancel(:cancelled);
-- dependency_failed: its parent died.
SELECT pgq.enqueue('work', '{"n": "parent"}') AS parent \gset
SELECT pgq.enqueue('work', '{"n": "child"}', after => ARRAY[:parent]) AS child \gset
SELECT pgq.cancel(:parent);
-- expired: its lease ran out on its last attempt.
SELECT pgq.enqueue('work', '{"n": "expired"}') AS expired \gset
SELECT id = :expired AS claimed FROM pgq.claim('work');
SET pgq.debug_clock_offset = '2min';
SELECT expired_dead FROM pgq.maintain();
RESET pgq.debug_clock_offset;
-- done, and one still ready.
SELECT pgq.enqueue('work', '{"n": "done"}') AS done \gset
SELECT pgq.complete(id, attempt) FROM pgq.claim('work');
SELECT pgq.enqueue('work', '{"n": "ready"}') AS ready \gset

-- job_info.dead_reason: NULL unless dead or cancelled.
SELECT payload->>'n' AS job, state, dead_reason FROM pgq.list_jobs('work') ORDER BY id;
SELECT state, dead_reason FROM pgq.job(:child);
-- list_jobs filters on it, alone or with a state.
SELECT payload->>'n' AS job FROM pgq.list_jobs('work', reason => 'expired');
SELECT payload->>'n' AS job FROM pgq.list_jobs('work', reason => 'cancelled') ORDER BY id;
SELECT payload->>'n' AS job FROM pgq.list_jobs('work', 'dead', reason => 'dependency_failed');
SELECT count(*) AS none FROM pgq.list_jobs('work', 'dead', reason => 'cancelled');
SELECT count(*) AS none FROM pgq.list_jobs('work', 'ready', reason => 'exhausted');
SELECT pg_temp.error_of($$SELECT * FROM pgq.list_jobs('work', reason => 'lost')$$);

-- ---- cancel_job and retry_dead_job: why nothing happened -------------------
SELECT pgq.cancel_job(:ready) AS cancel_ready, pgq.cancel_job(:ready) AS again,
       pgq.cancel_job(:done) AS cancel_done, pgq.cancel_job(:exhausted) AS cancel_dead,
       pgq.cancel_job(424242) AS cancel_unknown;
SELECT pgq.retry_dead_job(:exhausted) AS retry_dead, pgq.retry_dead_job(:exhausted) AS again,
       pgq.retry_dead_job(:done) AS retry_done, pgq.retry_dead_job(424242) AS retry_unknown;
-- A running job is cancelled too; once cancelled it can be retried.
SELECT id = :exhausted AS claimed FROM pgq.claim('work');
SELECT pgq.cancel_job(:exhausted) AS cancel_running, pgq.retry_dead_job(:cancelled) AS retry_cancelled;
-- A dead job whose dedupe key a live job holds stays dead, and says so.
SELECT pgq.enqueue('work', '{"n": "keyed"}', dedupe_key => 'k') AS keyed \gset
SELECT pgq.cancel(:keyed);
SELECT pgq.enqueue('work', '{"n": "holder"}', dedupe_key => 'k') AS holder \gset
SELECT pgq.retry_dead_job(:keyed) AS key_taken;
-- The boolean cancel and retry_dead keep their contract.
SELECT pgq.cancel(:done) AS cancel_done, pgq.retry_dead(:done) AS retry_done;
-- NULL ids are bad input.
SELECT pg_temp.error_of($$SELECT pgq.cancel_job(NULL)$$);
SELECT pg_temp.error_of($$SELECT pgq.retry_dead_job(NULL)$$);

-- Rights: a job of a queue the caller holds no right on answers exactly
-- like an unknown id; with no right anywhere, 42501 (as cancel).
SELECT pgq.enqueue('work', '{"n": "target"}') AS target \gset
SELECT pgq.enqueue('work', '{"n": "dead target"}') AS dead_target \gset
SELECT pgq.cancel(:dead_target);
SET ROLE pgq_rs_elsewhere;
SELECT pgq.cancel_job(:target) AS live, pgq.cancel_job(:done) AS done,
       pgq.cancel_job(424242) AS unknown;
SELECT pgq.retry_dead_job(:dead_target) AS dead, pgq.retry_dead_job(:target) AS live,
       pgq.retry_dead_job(424242) AS unknown;
RESET ROLE;
SET ROLE pgq_rs_consumer;  -- consume: may not cancel (produce or admin) nor retry (admin)
SELECT pg_temp.error_of(format('SELECT pgq.cancel_job(%s)', :target));
SELECT pg_temp.error_of(format('SELECT pgq.retry_dead_job(%s)', :dead_target));
RESET ROLE;
SET ROLE pgq_rs_nobody;
SELECT pg_temp.error_of(format('SELECT pgq.cancel_job(%s)', :target));
SELECT pg_temp.error_of(format('SELECT pgq.retry_dead_job(%s)', :dead_target));
RESET ROLE;
SET ROLE pgq_rs_producer;  -- produce: may cancel, may not retry
SELECT pg_temp.error_of(format('SELECT pgq.retry_dead_job(%s)', :dead_target));
SELECT pgq.cancel_job(:target) AS producer_cancels, pgq.cancel_job(:done) AS done;
RESET ROLE;
SET ROLE pgq_rs_admin;
SELECT pgq.retry_dead_job(:dead_target) AS admin_retries, pgq.retry_dead_job(:target) AS cancelled,
       pgq.retry_dead_job(:done) AS done;
RESET ROLE;

-- ---- purge_dead_job: one dead job deleted, admin right ---------------------
SELECT pgq.enqueue('work', '{"n": "purge me"}') AS purge_me \gset
SELECT pgq.cancel(:purge_me);
SET ROLE pgq_rs_elsewhere;  -- admin of 'other' only: as an unknown id
SELECT pgq.purge_dead_job(:purge_me) AS dead, pgq.purge_dead_job(:ready) AS live,
       pgq.purge_dead_job(424242) AS unknown;
RESET ROLE;
SET ROLE pgq_rs_producer;  -- produce, consume: may not purge; nobody: no right anywhere
SELECT pg_temp.error_of(format('SELECT pgq.purge_dead_job(%s)', :purge_me));
RESET ROLE;
SET ROLE pgq_rs_consumer;
SELECT pg_temp.error_of(format('SELECT pgq.purge_dead_job(%s)', :purge_me));
RESET ROLE;
SET ROLE pgq_rs_nobody;
SELECT pg_temp.error_of(format('SELECT pgq.purge_dead_job(%s)', :purge_me));
RESET ROLE;
SET ROLE pgq_rs_admin;
SELECT pgq.purge_dead_job(:purge_me) AS purged, pgq.purge_dead_job(:purge_me) AS again,
       pgq.purge_dead_job(:holder) AS live, pgq.purge_dead_job(:done) AS done,
       pgq.purge_dead_job(424242) AS unknown;
RESET ROLE;
SELECT count(*) AS gone FROM pgq.list_jobs('work') WHERE id = :purge_me;
SELECT pg_temp.error_of($$SELECT pgq.purge_dead_job(NULL)$$);

-- ---- queue_settings: any right on the queue ---------------------------------
SELECT queue_name, max_attempts, lease, backoff_base, backoff_max, retention, keep_completed,
       keep_dead, notify, rate_limit, max_running, group_concurrency, handler, owner = current_user AS mine,
       paused, created_at <= now() AS created
  FROM pgq.queue_settings('work');
SELECT queue_name FROM pgq.queue_settings() ORDER BY 1;
SET ROLE pgq_rs_consumer;
SELECT queue_name, max_attempts, lease, rate_limit, max_running, group_concurrency, paused
  FROM pgq.queue_settings();
SELECT pg_temp.error_of($$SELECT * FROM pgq.queue_settings('other')$$);
RESET ROLE;
SET ROLE pgq_rs_producer;
SELECT queue_name FROM pgq.queue_settings();
RESET ROLE;
SET ROLE pgq_rs_admin;
SELECT queue_name FROM pgq.queue_settings('work');
RESET ROLE;
SET ROLE pgq_rs_nobody;
SELECT count(*) AS sees_nothing FROM pgq.queue_settings();
SELECT pg_temp.error_of($$SELECT * FROM pgq.queue_settings('work')$$);
RESET ROLE;
SELECT pg_temp.error_of($$SELECT * FROM pgq.queue_settings('nope')$$);

-- ---- queue_workers: the queue's admin ----------------------------------------
SELECT pgq.enqueue('work', '{"n": "w1"}') AS w1, pgq.enqueue('work', '{"n": "w2"}') AS w2 \gset
SELECT count(*) AS claimed FROM pgq.claim('work', 2);
SELECT queue_name, claimer_pid = pg_backend_pid() AS me, claimer_role, claimer_connected, running,
       oldest_claimed_at <= newest_claimed_at AS ordered, expired
  FROM pgq.queue_workers('work');
SET ROLE pgq_rs_admin;
SELECT queue_name, claimer_pid = pg_backend_pid() AS me, claimer_role, running
  FROM pgq.queue_workers();
RESET ROLE;
SET ROLE pgq_rs_consumer;
SELECT pg_temp.error_of($$SELECT * FROM pgq.queue_workers('work')$$);
SELECT count(*) AS sees_nothing FROM pgq.queue_workers();
RESET ROLE;
SET ROLE pgq_rs_producer;
SELECT pg_temp.error_of($$SELECT * FROM pgq.queue_workers('work')$$);
RESET ROLE;
SET ROLE pgq_rs_elsewhere;
SELECT count(*) AS sees_nothing FROM pgq.queue_workers();
RESET ROLE;
SET ROLE pgq_rs_nobody;
SELECT count(*) AS sees_nothing FROM pgq.queue_workers();
RESET ROLE;
-- A lease past its end counts as expired.
SET pgq.debug_clock_offset = '2min';
SELECT running, expired FROM pgq.queue_workers('work');
RESET pgq.debug_clock_offset;

-- ---- list_schedule_runs: the queue's admin -------------------------------
SELECT pgq.schedule('tick', 'work', '* * * * *', '{"n": "tick"}');
SELECT pgq.schedule('tock', 'other', '* * * * *', '{"n": "tock"}');
SET pgq.debug_clock_offset = '2min';
SELECT schedules_fired FROM pgq.maintain();
RESET pgq.debug_clock_offset;
SELECT schedule_name, queue_name, fired_at >= slot AS after_slot,
       job_id = (SELECT last_job_id FROM pgq.schedules s WHERE s.name = schedule_name) AS its_job
  FROM pgq.list_schedule_runs() ORDER BY 1;
SELECT schedule_name FROM pgq.list_schedule_runs(schedule => 'tock');
SET ROLE pgq_rs_admin;
SELECT schedule_name, queue_name FROM pgq.list_schedule_runs();
SELECT count(*) AS not_its_queue FROM pgq.list_schedule_runs(schedule => 'tock');
RESET ROLE;
SET ROLE pgq_rs_consumer;
SELECT count(*) AS sees_nothing FROM pgq.list_schedule_runs();
SELECT pg_temp.error_of($$SELECT * FROM pgq.list_schedule_runs('work')$$);
RESET ROLE;
SET ROLE pgq_rs_nobody;
SELECT count(*) AS sees_nothing FROM pgq.list_schedule_runs();
RESET ROLE;
SELECT pg_temp.error_of($$SELECT * FROM pgq.list_schedule_runs(max => 0)$$);

-- ---- Coordination readers: EXECUTE, as the coordination functions --------
SELECT pgq.add_member('support', 'ann'), pgq.add_member('support', 'bob'),
       pgq.add_member('support', 'cy');
SELECT pgq.set_member_active('support', 'bob', false);
SELECT pgq.assign('support', 'ticket-1');
SELECT pgq.set_switch('maintenance', true), pgq.set_switch('beta', false);
SELECT pgq.advance('order-1', 2), pgq.advance('order-2', 1);
SELECT name, turn, active_members, inactive_members, last_member, assignments FROM pgq.list_teams();
SELECT name, value FROM pgq.list_switches();
SELECT name, value FROM pgq.list_switches('beta');
SELECT subject, step FROM pgq.list_ladders() ORDER BY subject;
SELECT subject, step FROM pgq.list_ladders('order-1');
SET ROLE pgq_rs_admin;  -- a queue right is not a coordination right
SELECT pg_temp.error_of($$SELECT * FROM pgq.list_teams()$$);
SELECT pg_temp.error_of($$SELECT * FROM pgq.list_switches()$$);
SELECT pg_temp.error_of($$SELECT * FROM pgq.list_ladders()$$);
RESET ROLE;
GRANT EXECUTE ON FUNCTION pgq.list_switches(text, integer) TO pgq_rs_admin;
SET ROLE pgq_rs_admin;
SELECT name, value FROM pgq.list_switches();
RESET ROLE;
SELECT pg_temp.error_of($$SELECT * FROM pgq.list_teams(max => 0)$$);

-- ---- job_dependencies: parents, children, and what a dead parent took ------
-- wf_a (work) <- wf_b (work, also after wf_x of 'other') <- wf_c (work);
-- wf_d (work) after wf_a too. Then wf_a is cancelled: wf_b and wf_d die
-- (taken), wf_c dies with wf_b.
SELECT pgq.enqueue('work', '{"n": "wf_a"}', dedupe_key => 'wf-key') AS wf_a \gset
SELECT pgq.enqueue('other', '{"n": "wf_x"}') AS wf_x \gset
SELECT pgq.enqueue('work', '{"n": "wf_b"}', after => ARRAY[:wf_a, :wf_x], group_key => 'wf-key') AS wf_b \gset
SELECT pgq.enqueue('work', '{"n": "wf_c"}', after => ARRAY[:wf_b]) AS wf_c \gset
SELECT pgq.enqueue('work', '{"n": "wf_d"}', after => ARRAY[:wf_a]) AS wf_d \gset
CREATE TEMP TABLE wf AS SELECT :wf_a AS a, :wf_b AS b, :wf_c AS c, :wf_d AS d, :wf_x AS x;
GRANT SELECT ON wf TO PUBLIC;
CREATE FUNCTION pg_temp.deps(job bigint, max integer DEFAULT 100) RETURNS TABLE (direction text, job text, queue text, state text)
LANGUAGE sql AS $$
  SELECT r.direction, CASE r.job_id WHEN w.a THEN 'wf_a' WHEN w.b THEN 'wf_b' WHEN w.c THEN 'wf_c'
                                    WHEN w.d THEN 'wf_d' WHEN w.x THEN 'wf_x' END, r.queue, r.state
    FROM pgq.job_dependencies(job, max) r, wf w
$$;
GRANT EXECUTE ON FUNCTION pg_temp.deps(bigint, integer) TO PUBLIC;
SELECT * FROM pg_temp.deps(:wf_a);
SELECT * FROM pg_temp.deps(:wf_b);
SELECT * FROM pg_temp.deps(:wf_a, 1);
SELECT count(*) AS unknown FROM pgq.job_dependencies(-1);
-- Each right on 'work' sees the same; a related job of 'other' is left out.
SET ROLE pgq_rs_consumer;
SELECT * FROM pg_temp.deps(:wf_b);
RESET ROLE;
SET ROLE pgq_rs_admin;
SELECT * FROM pg_temp.deps(:wf_a);
RESET ROLE;
SET ROLE pgq_rs_producer;
SELECT * FROM pg_temp.deps(:wf_b);
RESET ROLE;
-- A right on 'other' only: a job of 'work' has none, as an unknown id.
SET ROLE pgq_rs_elsewhere;
SELECT count(*) AS as_unknown FROM pgq.job_dependencies(:wf_b);
SELECT count(*) AS child_left_out FROM pgq.job_dependencies(:wf_x);
RESET ROLE;
SET ROLE pgq_rs_nobody;
SELECT pg_temp.error_of($$SELECT * FROM pgq.job_dependencies(1)$$);
RESET ROLE;
SELECT pg_temp.error_of($$SELECT * FROM pgq.job_dependencies(NULL)$$);
SELECT pg_temp.error_of($$SELECT * FROM pgq.job_dependencies(1, 0)$$);
SELECT pg_temp.error_of($$SELECT * FROM pgq.job_dependencies(1, 10001)$$);
-- The parent dies: what it took with it.
SELECT pgq.cancel(:wf_a);
SELECT * FROM pg_temp.deps(:wf_a);
SELECT * FROM pg_temp.deps(:wf_b);
SET ROLE pgq_rs_admin;
SELECT * FROM pg_temp.deps(:wf_a);
RESET ROLE;

-- ---- find_jobs: by dedupe or group key, live jobs ---------------------------
SELECT pgq.enqueue('work', '{"n": "k1"}', dedupe_key => 'order-7') AS k1 \gset
SELECT pgq.enqueue('work', '{"n": "k2"}', group_key => 'order-7') AS k2 \gset
SELECT pgq.enqueue('other', '{"n": "k3"}', group_key => 'order-7') AS k3 \gset
SELECT pgq.enqueue('work', '{"n": "k4"}', group_key => 'order-8') AS k4 \gset
SELECT payload->>'n' AS job, queue, state, group_key, dedupe_key FROM pgq.find_jobs('order-7');
SELECT payload->>'n' AS job FROM pgq.find_jobs('order-7', 1);
SELECT count(*) AS none FROM pgq.find_jobs('no-such-key');
-- The dead are not looked for (no index on the keys of pgq.dead_jobs).
SELECT count(*) AS none FROM pgq.find_jobs('wf-key');
SET ROLE pgq_rs_consumer;  -- sees everything of 'work'
SELECT payload->>'n' AS job, queue FROM pgq.find_jobs('order-7');
RESET ROLE;
SET ROLE pgq_rs_admin;  -- admin alone: no payload
SELECT payload, queue, state FROM pgq.find_jobs('order-7');
RESET ROLE;
SET ROLE pgq_rs_elsewhere;
SELECT payload->>'n' AS job, queue FROM pgq.find_jobs('order-7');
RESET ROLE;
SET ROLE pgq_rs_nobody;
SELECT pg_temp.error_of($$SELECT * FROM pgq.find_jobs('order-7')$$);
RESET ROLE;
SELECT pg_temp.error_of($$SELECT * FROM pgq.find_jobs(NULL)$$);
SELECT pg_temp.error_of($$SELECT * FROM pgq.find_jobs('order-7', 0)$$);
SELECT pg_temp.error_of($$SELECT * FROM pgq.find_jobs('order-7', 10001)$$);
-- Through the key indexes, not a scan of pgq.job_rows (find_jobs reads the
-- rings only of the queues whose pgq.group_holds name the key).
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT j.id FROM pgq.job_rows j
 WHERE (j.dedupe_key = 'k' OR j.group_key = 'k')
   AND j.queue_id = ANY (CASE WHEN true THEN ARRAY(SELECT a.queue_id FROM pgq.queues a) ELSE NULL::int4[] END);
RESET enable_seqscan;

-- ---- stream_segments: each stream's ring, for its roles ------------------------
SELECT pgq.create_stream('rs_ring', rotation => '1 hour'), pgq.create_stream('rs_hidden');
SELECT pgq.grant_stream('pgq_rs_consumer', 'rs_ring', 'consume');
SELECT pgq.append('rs_ring', '{}') > 0 AS appended;
CREATE FUNCTION pg_temp.turn_ring() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pgq.alter_stream('rs_ring', rotation => '1 second');
  PERFORM pg_sleep(1.1);
  PERFORM pgq.maintain();
  PERFORM pgq.alter_stream('rs_ring', rotation => '1 hour');
END
$$;
CREATE TEMP VIEW rs_segments AS
SELECT stream_name, rotation, segments, current_segment, rotations, segment, state,
       bytes > 0 AS has_bytes, opened_at IS NOT NULL AS opened, sealed_at IS NOT NULL AS sealed,
       truncated_at IS NOT NULL AS truncated
  FROM pgq.stream_segments();
GRANT SELECT ON rs_segments TO PUBLIC;
SELECT * FROM rs_segments;
-- The ring turns: segment 0 is sealed, then (no consumer holds it) truncated.
SELECT pg_temp.turn_ring();
SELECT * FROM rs_segments WHERE stream_name = 'rs_ring';
SELECT expired_requeued FROM pgq.maintain();
SELECT segment, state, truncated FROM rs_segments WHERE stream_name = 'rs_ring';
SELECT stream_name, segment, state FROM pgq.stream_segments('rs_hidden');
-- A right on one stream: that stream's rows only; named, another is refused.
SET ROLE pgq_rs_consumer;
SELECT stream_name, segment, state FROM rs_segments;
SELECT pg_temp.error_of($$SELECT * FROM pgq.stream_segments('rs_hidden')$$);
RESET ROLE;
SET ROLE pgq_rs_nobody;
SELECT count(*) AS sees_nothing FROM pgq.stream_segments();
SELECT pg_temp.error_of($$SELECT * FROM pgq.stream_segments('rs_ring')$$);
RESET ROLE;
SELECT pg_temp.error_of($$SELECT * FROM pgq.stream_segments('no_such_stream')$$);
DROP VIEW rs_segments;

DROP EXTENSION pgq_cpp;
DROP ROLE pgq_rs_producer;
DROP ROLE pgq_rs_consumer;
DROP ROLE pgq_rs_admin;
DROP ROLE pgq_rs_elsewhere;
DROP ROLE pgq_rs_nobody;
