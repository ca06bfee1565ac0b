-- pgq_cpp 1.1 -> 1.2, run by ALTER EXTENSION pgq_cpp UPDATE (and after the
-- 1.0 and 1.0 -> 1.1 scripts by a fresh CREATE EXTENSION). The rules of
-- pgq_cpp--1.0--1.1.sql hold: it runs on a database holding live jobs, with
-- search_path pg_catalog only, every object of ours qualified with pgq. and
-- every operator with OPERATOR(pg_catalog.x); test/t/009_upgrade.pl checks
-- that an updated database ends with a fresh install's catalog.

\echo Use "ALTER EXTENSION pgq_cpp UPDATE" to load this file. \quit

-- Stored values that took maintenance and monitoring out of the timestamp
-- range (issue 15, M3) ----------------------------------------------------
--
-- 1.2 refuses queue intervals over 100 years and infinite run_at times; the
-- ones stored before are brought within those bounds (a job due at
-- -infinity is due now, one due at infinity is due in 100 years).

UPDATE pgq.queues
   SET retention = LEAST(retention, interval '100 years'),
       backoff_max = LEAST(backoff_max, interval '100 years'),
       backoff_base = LEAST(backoff_base, interval '100 years')
 WHERE retention OPERATOR(pg_catalog.>) interval '100 years'
    OR backoff_max OPERATOR(pg_catalog.>) interval '100 years';
UPDATE pgq.jobs
   SET run_at = CASE WHEN run_at OPERATOR(pg_catalog.<) pg_catalog.now() THEN pg_catalog.now()
                     ELSE pg_catalog.now() OPERATOR(pg_catalog.+) interval '100 years' END
 WHERE NOT pg_catalog.isfinite(run_at);

-- The same state and reason rules, written as constant arrays (issue 16).
-- PostgreSQL reads and simplifies a CHECK expression again for every
-- statement that inserts or updates the table, and an ARRAY[...] of
-- literals is folded into a constant each time: 3 of the 17 microseconds
-- of an enqueue, and as much on every claim. A constant array costs nothing.
ALTER TABLE pgq.jobs
    DROP CONSTRAINT jobs_state_check,
    ADD CONSTRAINT jobs_state_check
        CHECK (state OPERATOR(pg_catalog.=) ANY ('{p,r,w}'::pg_catalog."char"[]));
ALTER TABLE pgq.dead_jobs
    DROP CONSTRAINT dead_jobs_reason_check,
    ADD CONSTRAINT dead_jobs_reason_check
        CHECK (reason OPERATOR(pg_catalog.=) ANY ('{exhausted,cancelled,expired}'::pg_catalog.text[]));

-- queue_stats as in 1.1, but the age of the oldest ready job leaves out a
-- row it could not subtract, so no stored row can make the view fail.
CREATE OR REPLACE VIEW pgq.queue_stats WITH (security_barrier) AS
SELECT q.name                                   AS queue,
       COALESCE(j.ready, 0)                     AS ready,
       COALESCE(j.scheduled, 0)                 AS scheduled,
       COALESCE(j.running, 0)                   AS running,
       COALESCE(j.expired, 0)                   AS expired,
       (SELECT pg_catalog.count(*) FROM pgq.dead_jobs d
         WHERE d.queue OPERATOR(pg_catalog.=) q.name)                    AS dead,
       (SELECT COALESCE(pg_catalog.sum(f.jobs), 0) FROM pgq.finished f
         WHERE f.queue_id OPERATOR(pg_catalog.=) q.queue_id
           AND f.finished_at OPERATOR(pg_catalog.>=) (c.now OPERATOR(pg_catalog.-) q.retention))
         OPERATOR(pg_catalog.+) pgq.unflushed_completions(q.queue_id) AS done_recent,
       c.now OPERATOR(pg_catalog.-) j.oldest_ready AS oldest_ready_age,
       q.paused
  FROM pgq.queues q
 CROSS JOIN (SELECT pgq.clock() AS now) c
  LEFT JOIN (
        SELECT jj.queue_id,
               pg_catalog.count(*) FILTER (WHERE jj.state OPERATOR(pg_catalog.<>) 'r'
                                             AND jj.run_at OPERATOR(pg_catalog.<=) cc.now) AS ready,
               pg_catalog.count(*) FILTER (WHERE jj.state OPERATOR(pg_catalog.<>) 'r'
                                             AND jj.run_at OPERATOR(pg_catalog.>) cc.now)  AS scheduled,
               pg_catalog.count(*) FILTER (WHERE jj.state OPERATOR(pg_catalog.=) 'r')       AS running,
               pg_catalog.count(*) FILTER (WHERE jj.state OPERATOR(pg_catalog.=) 'r'
                                             AND jj.lease_until OPERATOR(pg_catalog.<) cc.now) AS expired,
               pg_catalog.min(jj.run_at) FILTER (WHERE jj.state OPERATOR(pg_catalog.<>) 'r'
                                             AND jj.run_at OPERATOR(pg_catalog.<=) cc.now
                                             AND pg_catalog.isfinite(jj.run_at)) AS oldest_ready
          FROM pgq.jobs jj CROSS JOIN (SELECT pgq.clock() AS now) cc
         GROUP BY jj.queue_id
       ) j ON j.queue_id OPERATOR(pg_catalog.=) q.queue_id
 WHERE pgq.has_queue_privilege(q.name, 'produce, consume, admin');

-- Topics have owners and rights (issue 15, M4; docs/security.md) -----------
--
-- A topic is created by a role with the admin right on every queue, which
-- owns it. Publishing takes the publish right on the topic, and then
-- enqueues into every subscribed queue whatever the publisher's rights on
-- them: a subscription is the subscribing queue's admin's decision, and
-- never makes someone else's publish fail. Subscribing takes the admin right
-- on the queue and the subscribe right on the topic: a topic's events reach
-- only queues its owner allowed.

CREATE TABLE pgq.topics (
    name       text               PRIMARY KEY,
    owner      pg_catalog.regrole NOT NULL,  -- dumped and restored by name
    created_at timestamptz        NOT NULL DEFAULT pg_catalog.now()
);
SELECT pg_catalog.pg_extension_config_dump('pgq.topics', '');
COMMENT ON TABLE pgq.topics IS 'topics of the outbox and who owns each; written by pgq.create_topic and pgq.drop_topic';

CREATE TABLE pgq.topic_grants (
    role      pg_catalog.regrole NOT NULL,
    topic     text NOT NULL REFERENCES pgq.topics ON DELETE CASCADE ON UPDATE CASCADE,
    privilege text NOT NULL CHECK (privilege OPERATOR(pg_catalog.=) ANY (ARRAY['publish', 'subscribe'])),
    PRIMARY KEY (role, topic, privilege)
);
SELECT pg_catalog.pg_extension_config_dump('pgq.topic_grants', '');
COMMENT ON TABLE pgq.topic_grants IS 'who may publish to or subscribe a queue to which topic; written by pgq.grant_topic and pgq.revoke_topic';

-- The topics in use in 1.1 become topics owned by the owner of their first
-- subscribed queue (by queue id), or by the owner of pgq's tables when none
-- is subscribed. What worked in 1.1 keeps working: each subscribed queue's
-- owner may subscribe, and every role that could publish (the produce right
-- on every subscribed queue, or on some queue for a topic with none) may
-- publish.
INSERT INTO pgq.topics (name, owner)
SELECT t.topic,
       COALESCE((SELECT r.oid FROM pgq.subscriptions s
                   JOIN pgq.queues q ON q.queue_id OPERATOR(pg_catalog.=) s.queue_id
                   JOIN pg_catalog.pg_roles r ON r.rolname OPERATOR(pg_catalog.=) q.owner
                  WHERE s.topic OPERATOR(pg_catalog.=) t.topic
                  ORDER BY s.queue_id LIMIT 1),
                (SELECT n.nspowner FROM pg_catalog.pg_namespace n
                  WHERE n.nspname OPERATOR(pg_catalog.=) 'pgq'))::pg_catalog.regrole
  FROM (SELECT topic FROM pgq.subscriptions UNION SELECT topic FROM pgq.events) t;

INSERT INTO pgq.topic_grants (role, topic, privilege)
SELECT DISTINCT r.oid::pg_catalog.regrole, s.topic, 'subscribe'
  FROM pgq.subscriptions s
  JOIN pgq.queues q ON q.queue_id OPERATOR(pg_catalog.=) s.queue_id
  JOIN pg_catalog.pg_roles r ON r.rolname OPERATOR(pg_catalog.=) q.owner;

WITH producers(role, queue_id) AS (
    SELECT g.role, g.queue_id FROM pgq.grants g
     WHERE g.privilege OPERATOR(pg_catalog.=) 'produce'
    UNION ALL
    SELECT r.oid::pg_catalog.regrole, q.queue_id FROM pgq.queues q
      JOIN pg_catalog.pg_roles r ON r.rolname OPERATOR(pg_catalog.=) q.owner)
INSERT INTO pgq.topic_grants (role, topic, privilege)
SELECT DISTINCT p.role, t.name, 'publish'
  FROM pgq.topics t CROSS JOIN (SELECT DISTINCT role FROM producers) p
 WHERE NOT EXISTS (
        SELECT 1 FROM pgq.subscriptions s
         WHERE s.topic OPERATOR(pg_catalog.=) t.name
           AND NOT EXISTS (SELECT 1 FROM producers pp
                            WHERE pp.role OPERATOR(pg_catalog.=) p.role
                              AND (pp.queue_id IS NULL
                                   OR pp.queue_id OPERATOR(pg_catalog.=) s.queue_id)))
ON CONFLICT DO NOTHING;

ALTER TABLE pgq.subscriptions
    ADD FOREIGN KEY (topic) REFERENCES pgq.topics ON DELETE CASCADE ON UPDATE CASCADE;

CREATE FUNCTION pgq.create_topic(topic text, if_not_exists boolean DEFAULT false)
RETURNS void AS 'MODULE_PATHNAME', 'pgq_create_topic' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.create_topic(text, boolean) IS
    'creates a topic owned by the calling role (which needs the admin right on every queue)';

CREATE FUNCTION pgq.drop_topic(topic text)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_drop_topic' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.drop_topic(text) IS
    'drops a topic with its subscriptions and grants (its published events stay); its owner''s';

CREATE FUNCTION pgq.grant_topic(role name, topic text, privilege text)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_grant_topic' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.grant_topic(name, text, text) IS
    'gives role the privilege (publish or subscribe) on topic; its owner''s; true if it did not hold it yet';

CREATE FUNCTION pgq.revoke_topic(role name, topic text, privilege text)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_revoke_topic' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.revoke_topic(name, text, text) IS
    'takes back a grant made with pgq.grant_topic; true if there was one';

COMMENT ON FUNCTION pgq.subscribe(text, text) IS
    'routes the topic''s events into the queue: the admin right on the queue and the subscribe right on the topic';
COMMENT ON FUNCTION pgq.publish(text, jsonb, text) IS
    'records an event and enqueues one job per subscribed queue, in the caller''s transaction: the publish right on the topic';

-- Every function, view and table says what it is (issue 16): \df+ and \d+
-- in psql, and tools that read the catalog, show it. test_reference.py
-- checks that none lacks one.

COMMENT ON FUNCTION pgq.create_queue(text, integer, interval, interval, interval, interval, boolean, real, regprocedure, boolean) IS
    'creates a queue owned by the calling role (the admin right on every queue): its default max_attempts, lease, backoff, retention, NOTIFY, rate limit and in-database handler';
COMMENT ON FUNCTION pgq.alter_queue(text, integer, interval, interval, interval, interval, boolean, real, regprocedure) IS
    'changes the settings given (NULL: unchanged); the handler only by the queue''s owner; admin right';
COMMENT ON FUNCTION pgq.drop_queue(text, boolean) IS
    'drops a queue; refuses while it holds pending, running or dead jobs unless force; admin right';
COMMENT ON FUNCTION pgq.pause(text) IS
    'stops claims from the queue (enqueues still accepted); returns the stored paused flag; admin right';
COMMENT ON FUNCTION pgq.resume(text) IS
    'lets claims take jobs from the queue again; returns the stored paused flag; admin right';
COMMENT ON FUNCTION pgq.enqueue(text, jsonb, timestamp with time zone, integer, text, integer, text) IS
    'adds a job in the caller''s transaction and returns its id (the holder''s id for a dedupe_key already held); produce right';
COMMENT ON FUNCTION pgq.enqueue_many(text, jsonb[], timestamp with time zone, integer) IS
    'adds one job per payload in one statement; their ids in input order; produce right';
COMMENT ON FUNCTION pgq.claim(text, integer, interval, interval) IS
    'leases up to n ready jobs (priority, then run_at, then id) in the same statement that selects them; with wait, blocks until one is enqueued or the wait ends; consume right';
COMMENT ON FUNCTION pgq.complete(bigint, integer) IS
    'finishes a claimed job; false when the claim no longer holds it (fenced by attempt); consume right';
COMMENT ON FUNCTION pgq.complete_many(bigint[], integer[]) IS
    'finishes several claimed jobs in one statement; how many were still held; consume right';
COMMENT ON FUNCTION pgq.fail(bigint, integer, text, interval) IS
    'records a failed attempt: ''retry'' after the backoff (or retry_in), ''dead'' when attempts are exhausted, ''lost'' when fenced; consume right';
COMMENT ON FUNCTION pgq.extend(bigint, integer, interval) IS
    'extends a claim''s lease (heartbeat); the new lease_until, or NULL when the claim no longer holds; consume right';
COMMENT ON FUNCTION pgq.release(bigint, integer) IS
    'gives a claimed job back now without counting the attempt (graceful shutdown); consume right';
COMMENT ON FUNCTION pgq.cancel(bigint) IS
    'moves a pending job to dead-letter with reason cancelled; produce or admin right';
COMMENT ON FUNCTION pgq.retry_dead(bigint) IS
    'requeues one dead-letter job with fresh attempts; admin right';
COMMENT ON FUNCTION pgq.retry_dead(text, integer) IS
    'requeues up to max dead-letter jobs of the queue, oldest first; how many; admin right';
COMMENT ON FUNCTION pgq.maintain() IS
    'one maintenance pass in the calling database (expire leases, dead-letter, drop finished rows, fire schedules): what the background worker runs; admin right on every queue';
COMMENT ON FUNCTION pgq.compact_jobs() IS
    'rewrites pgq.jobs now if it is worth it (ADR 0008); owner of pgq.jobs or superuser';
COMMENT ON FUNCTION pgq.add_member(text, text) IS
    'adds a member to a team (creating the team); the member''s stable id, which orders the turns';
COMMENT ON FUNCTION pgq.set_member_active(text, text, boolean) IS
    'sets whether a member takes turns (explicit value); returns the stored flag';
COMMENT ON FUNCTION pgq.remove_member(text, text) IS
    'removes a member from a team; whether it was one';
COMMENT ON FUNCTION pgq.next_turn(text) IS
    'the member whose turn it is, spending the turn; concurrent callers get consecutive turns';
COMMENT ON FUNCTION pgq.assign(text, text) IS
    'the owner of a subject: the existing one without spending a turn, else the next turn''s member; exactly one owner under any race';
COMMENT ON FUNCTION pgq.set_switch(text, boolean) IS
    'sets a named switch to an explicit value; returns the stored value';
COMMENT ON FUNCTION pgq.switch(text) IS
    'the stored value of a named switch, NULL if never set';
COMMENT ON FUNCTION pgq.advance(text, integer) IS
    'moves a ladder up to step, never down; returns the stored step';
COMMENT ON FUNCTION pgq.once(text) IS
    'true for the first transaction that commits with this key, false for every other: the idempotency primitive for handlers';
COMMENT ON FUNCTION pgq.schedule(text, text, text, jsonb, text) IS
    'creates or replaces a recurring job (cron in a time zone, @hourly.., or @every <interval>); admin and produce rights on its queue';
COMMENT ON FUNCTION pgq.unschedule(text) IS
    'removes a schedule; whether one of a queue the caller administers existed';
COMMENT ON FUNCTION pgq.unsubscribe(text, text) IS
    'stops routing a topic''s events into a queue; whether it was subscribed; admin on the queue or owner of the topic';

COMMENT ON VIEW pgq.running_jobs IS
    'one row per running job of the queues the reader holds a right on: who claimed it (pg_stat_activity) and its lease';
COMMENT ON VIEW pgq.workers IS
    'the pgq background workers (launcher, maintenance, handlers) as pg_stat_activity shows them, with each maintenance worker''s last pass; pg_monitor';

COMMENT ON TABLE pgq.queues IS 'the queues and their settings; written by create_queue, alter_queue, pause, resume, drop_queue';
COMMENT ON TABLE pgq.jobs IS 'pending, waiting and running jobs (the hot table: finished jobs leave it)';
COMMENT ON TABLE pgq.dead_jobs IS 'dead-letter: jobs whole, with their last error and the reason (exhausted, cancelled, expired)';
COMMENT ON TABLE pgq.finished IS 'completion counts per queue, written by maintenance (one row per queue and pass), for queue_stats.done_recent';
COMMENT ON TABLE pgq.rate_buckets IS 'token buckets of rate-limited queues when pgq_cpp is not preloaded (else in shared memory)';
COMMENT ON TABLE pgq.recurring IS 'schedules: spec, time zone, payload and the next slot; written by schedule and unschedule';
COMMENT ON TABLE pgq.schedule_runs IS 'each firing of a schedule (slot, time, job), kept for the queue''s retention';
COMMENT ON TABLE pgq.subscriptions IS 'which queues receive which topic''s events; written by subscribe and unsubscribe';
COMMENT ON TABLE pgq.events IS 'published events, the audit record of the outbox (the jobs carry the payload)';
COMMENT ON TABLE pgq.teams IS 'teams of the coordination primitives and whose turn was last';
COMMENT ON TABLE pgq.team_members IS 'members of teams, ordered by id for turns';
COMMENT ON TABLE pgq.assignments IS 'the owner of each subject (pgq.assign)';
COMMENT ON TABLE pgq.switches IS 'named switches (pgq.set_switch)';
COMMENT ON TABLE pgq.ladders IS 'ladders that only climb (pgq.advance)';
COMMENT ON TABLE pgq.once_keys IS 'keys taken by pgq.once';
