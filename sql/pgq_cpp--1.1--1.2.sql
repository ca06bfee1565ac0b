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
        CHECK (reason OPERATOR(pg_catalog.=) ANY ('{exhausted,cancelled,expired,dependency_failed}'::pg_catalog.text[]));

-- The job lifecycle (issue 17, SPEC §8; docs/lifecycle.md, ADR 0015) --------
--
-- Settings: completed jobs are kept keep_completed (0: not kept, as in 1.1),
-- dead jobs keep_dead (NULL: until retried or purged).
-- dedupe_periods: some job of the queue was enqueued with a dedupe_for,
-- so that its enqueues with a dedupe key look at pgq.dedupe_holds (set by
-- that enqueue; the others pay nothing until then).
ALTER TABLE pgq.queues
    ADD COLUMN keep_completed interval NOT NULL DEFAULT '0',
    ADD COLUMN keep_dead      interval,
    ADD COLUMN dedupe_periods boolean  NOT NULL DEFAULT false;

-- Concurrency caps (issue 18, docs/workflows.md): at most max_running jobs
-- of the queue running at once (NULL: no cap), at most group_concurrency of
-- one FIFO group (1: strict FIFO, as in 1.1).
ALTER TABLE pgq.queues
    ADD COLUMN max_running       integer,
    ADD COLUMN group_concurrency integer NOT NULL DEFAULT 1;

-- A capped claim counts its queue's running jobs: the running jobs'
-- index leads with the queue (maintenance finds expired leases queue by
-- queue through it).
DROP INDEX pgq.jobs_lease_idx;
CREATE INDEX jobs_lease_idx ON pgq.jobs (queue_id, lease_until)
    WHERE state OPERATOR(pg_catalog.=) 'r';

-- Jobs that wait (behind their FIFO group's head, or for their parents) by
-- queue and state: pgq.queue_overview counts them without reading the
-- table. Only waiting jobs are in it.
CREATE INDEX jobs_parked_idx ON pgq.jobs (queue_id, state)
    WHERE state OPERATOR(pg_catalog.=) ANY ('{w,b}'::pg_catalog."char"[]);

-- A running job's progress (pgq.progress), and how long its dedupe key
-- stays taken after it finished (enqueue's dedupe_for). Nullable columns
-- without a default: added without rewriting the table.
ALTER TABLE pgq.jobs
    ADD COLUMN progress   jsonb,
    ADD COLUMN dedupe_for interval;

-- Dependencies (issue 18, enqueue's after; docs/workflows.md): a job
-- waiting for its parents is in state 'b', outside the ready index, with
-- open_parents the number not yet done; a parent is marked has_dependents
-- (NULL: none) by the first child enqueued after it, so that only the
-- completions of parents look for children. Both NULL on every other row:
-- added without a rewrite, and cost a job without dependencies nothing.
ALTER TABLE pgq.jobs
    ADD COLUMN open_parents   integer,
    ADD COLUMN has_dependents boolean,
    DROP CONSTRAINT jobs_state_check,
    ADD CONSTRAINT jobs_state_check
        CHECK (state OPERATOR(pg_catalog.=) ANY ('{p,r,w,b}'::pg_catalog."char"[]));

-- One row per (parent, child) not yet settled: deleted when the parent
-- completes (the child's open_parents goes down) or dies (the child dies
-- with reason dependency_failed).
CREATE TABLE pgq.job_dependencies (
    parent_id bigint NOT NULL,
    child_id  bigint NOT NULL,
    PRIMARY KEY (parent_id, child_id)
);
SELECT pg_catalog.pg_extension_config_dump('pgq.job_dependencies', '');
COMMENT ON TABLE pgq.job_dependencies IS
    'which waiting job waits for which parent (enqueue''s after); a row leaves when its parent completes or dies';

-- Parents that died with children left to dead-letter: the transaction in
-- which a parent dies does a bounded part, maintenance the rest.
CREATE TABLE pgq.dependency_failures (
    parent_id bigint      NOT NULL PRIMARY KEY,
    failed_at timestamptz NOT NULL
);
SELECT pg_catalog.pg_extension_config_dump('pgq.dependency_failures', '');
COMMENT ON TABLE pgq.dependency_failures IS
    'parents that died (dead or cancelled) whose dependents are still being dead-lettered (dependency_failed)';

-- A job enqueued with on_duplicate => 'replace' while its key's holder runs
-- waits here, outside the hot table (whose every index each enqueue and
-- claim pays for), one per key, and moves into pgq.jobs under its id, pending
-- and holding the key, in the transaction in which the holder finishes.
CREATE TABLE pgq.dedupe_followers (
    queue_id     integer     NOT NULL REFERENCES pgq.queues ON DELETE CASCADE,
    dedupe_key   text        NOT NULL,
    id           bigint      NOT NULL UNIQUE,
    priority     integer     NOT NULL,
    run_at       timestamptz NOT NULL,
    max_attempts integer     NOT NULL,
    enqueued_at  timestamptz NOT NULL,
    dedupe_for   interval,
    group_key    text,                   -- its FIFO group, which it joins then
    payload      jsonb       NOT NULL,
    PRIMARY KEY (queue_id, dedupe_key)
);
SELECT pg_catalog.pg_extension_config_dump('pgq.dedupe_followers', '');
COMMENT ON TABLE pgq.dedupe_followers IS
    'jobs enqueued with on_duplicate => ''replace'' behind a running holder of their key: pending when it finishes';

-- Keys that stay taken after their job finished (dedupe_for): one row per
-- key, overwritten by the key's next job, deleted by maintenance once past.
CREATE TABLE pgq.dedupe_holds (
    queue_id   integer     NOT NULL REFERENCES pgq.queues ON DELETE CASCADE,
    dedupe_key text        NOT NULL,
    job_id     bigint      NOT NULL,
    held_until timestamptz NOT NULL,
    PRIMARY KEY (queue_id, dedupe_key)
);
SELECT pg_catalog.pg_extension_config_dump('pgq.dedupe_holds', '');
COMMENT ON TABLE pgq.dedupe_holds IS
    'dedupe keys that stay taken after their job finished (enqueue''s dedupe_for), until held_until';

-- Rings of segments: completed jobs and dead jobs live in tables of four
-- partitions each, one of them current. Maintenance recycles the oldest
-- segment: it copies the few rows still kept into the current one and
-- TRUNCATEs it, so history leaves in bulk, never by row deletes and their
-- vacuum (ADR 0015). `current` is where new rows go; the ring turns once
-- `rotated_at` is a period old.
CREATE TABLE pgq.segment_rings (
    ring       text        NOT NULL PRIMARY KEY CHECK (ring OPERATOR(pg_catalog.=) ANY ('{history,dead}'::pg_catalog.text[])),
    segments   smallint    NOT NULL,
    current    smallint    NOT NULL,
    rotated_at timestamptz NOT NULL
);
INSERT INTO pgq.segment_rings (ring, segments, current, rotated_at)
VALUES ('history', 4, 0, pg_catalog.now()), ('dead', 4, 0, pg_catalog.now());
COMMENT ON TABLE pgq.segment_rings IS
    'which segment of pgq.job_history and pgq.dead_jobs takes new rows; turned by maintenance';

-- Completed jobs of queues with keep_completed > 0, with their result.
CREATE TABLE pgq.job_history (
    id           bigint      NOT NULL,
    queue_id     integer     NOT NULL,
    attempt      integer     NOT NULL,
    max_attempts integer     NOT NULL,
    priority     integer     NOT NULL,
    run_at       timestamptz NOT NULL,
    enqueued_at  timestamptz NOT NULL,
    claimed_at   timestamptz,
    finished_at  timestamptz NOT NULL,
    dedupe_key   text,
    group_key    text,
    last_error   text,
    progress     jsonb,
    result       jsonb,
    payload      jsonb       NOT NULL,
    segment      smallint    NOT NULL
) PARTITION BY LIST (segment);
CREATE TABLE pgq.job_history_0 PARTITION OF pgq.job_history FOR VALUES IN (0);
CREATE TABLE pgq.job_history_1 PARTITION OF pgq.job_history FOR VALUES IN (1);
CREATE TABLE pgq.job_history_2 PARTITION OF pgq.job_history FOR VALUES IN (2);
CREATE TABLE pgq.job_history_3 PARTITION OF pgq.job_history FOR VALUES IN (3);
CREATE INDEX job_history_id_idx ON pgq.job_history (id);
CREATE INDEX job_history_queue_idx ON pgq.job_history (queue_id, id);
SELECT pg_catalog.pg_extension_config_dump('pgq.job_history_0', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.job_history_1', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.job_history_2', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.job_history_3', '');
COMMENT ON TABLE pgq.job_history IS
    'completed jobs kept for their queue''s keep_completed, with their result; a ring of four segments';
COMMENT ON TABLE pgq.job_history_0 IS 'a segment of pgq.job_history (pgq.segment_rings says which takes new rows)';
COMMENT ON TABLE pgq.job_history_1 IS 'a segment of pgq.job_history (pgq.segment_rings says which takes new rows)';
COMMENT ON TABLE pgq.job_history_2 IS 'a segment of pgq.job_history (pgq.segment_rings says which takes new rows)';
COMMENT ON TABLE pgq.job_history_3 IS 'a segment of pgq.job_history (pgq.segment_rings says which takes new rows)';

-- Dead-letter becomes a ring too. The 1.1 table, with its OID (so its rows
-- and its registration for pg_dump stay), is attached as segment 0.
ALTER TABLE pgq.dead_jobs
    DROP CONSTRAINT dead_jobs_pkey,
    ADD COLUMN progress   jsonb,
    ADD COLUMN dedupe_for interval,
    ADD COLUMN segment    smallint NOT NULL DEFAULT 0;
ALTER TABLE pgq.dead_jobs ALTER COLUMN segment DROP DEFAULT;
DROP INDEX pgq.dead_jobs_queue_idx;
ALTER TABLE pgq.dead_jobs RENAME TO dead_jobs_0;
CREATE TABLE pgq.dead_jobs (
    id           bigint      NOT NULL,
    queue        text        NOT NULL,
    payload      jsonb       NOT NULL,
    attempts     integer     NOT NULL,
    last_error   text,
    reason       text        NOT NULL,
    died_at      timestamptz NOT NULL,
    priority     integer     NOT NULL,
    max_attempts integer     NOT NULL,
    enqueued_at  timestamptz NOT NULL,
    dedupe_key   text,
    group_key    text,
    progress     jsonb,
    dedupe_for   interval,
    segment      smallint    NOT NULL,
    CONSTRAINT dead_jobs_reason_check
        CHECK (reason OPERATOR(pg_catalog.=) ANY ('{exhausted,cancelled,expired,dependency_failed}'::pg_catalog.text[]))
) PARTITION BY LIST (segment);
ALTER TABLE pgq.dead_jobs ATTACH PARTITION pgq.dead_jobs_0 FOR VALUES IN (0);
CREATE TABLE pgq.dead_jobs_1 PARTITION OF pgq.dead_jobs FOR VALUES IN (1);
CREATE TABLE pgq.dead_jobs_2 PARTITION OF pgq.dead_jobs FOR VALUES IN (2);
CREATE TABLE pgq.dead_jobs_3 PARTITION OF pgq.dead_jobs FOR VALUES IN (3);
CREATE INDEX dead_jobs_id_idx ON pgq.dead_jobs (id);
CREATE INDEX dead_jobs_queue_idx ON pgq.dead_jobs (queue, id);
SELECT pg_catalog.pg_extension_config_dump('pgq.dead_jobs_1', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.dead_jobs_2', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.dead_jobs_3', '');
COMMENT ON TABLE pgq.dead_jobs IS
    'dead-letter: jobs whole, with their last error and the reason (exhausted, cancelled, expired); a ring of four segments';
COMMENT ON TABLE pgq.dead_jobs_0 IS 'a segment of pgq.dead_jobs (pgq.segment_rings says which takes new rows)';
COMMENT ON TABLE pgq.dead_jobs_1 IS 'a segment of pgq.dead_jobs (pgq.segment_rings says which takes new rows)';
COMMENT ON TABLE pgq.dead_jobs_2 IS 'a segment of pgq.dead_jobs (pgq.segment_rings says which takes new rows)';
COMMENT ON TABLE pgq.dead_jobs_3 IS 'a segment of pgq.dead_jobs (pgq.segment_rings says which takes new rows)';

-- What pgq.job and pgq.list_jobs return.
CREATE TYPE pgq.job_info AS (
    id           bigint,
    queue        text,
    state        text,         -- scheduled, ready, waiting, running, done, dead, cancelled
    attempt      integer,
    max_attempts integer,
    priority     integer,
    group_key    text,
    dedupe_key   text,
    run_at       timestamptz,
    enqueued_at  timestamptz,
    claimed_at   timestamptz,
    lease_until  timestamptz,
    finished_at  timestamptz,
    progress     jsonb,
    result       jsonb,
    last_error   text,
    open_parents integer,      -- waiting for this many parents (enqueue's after); else NULL
    payload      jsonb
);

-- New arguments come last, so that every 1.1 call means what it meant.
DROP FUNCTION pgq.create_queue(text, integer, interval, interval, interval, interval, boolean, real, regprocedure, boolean);
CREATE FUNCTION pgq.create_queue(
    queue          text,
    max_attempts   integer     DEFAULT 5,
    lease          interval    DEFAULT '2 minutes',
    backoff_base   interval    DEFAULT '1 second',
    backoff_max    interval    DEFAULT '1 hour',
    retention      interval    DEFAULT '1 day',
    notify         boolean     DEFAULT false,
    rate_limit     real        DEFAULT NULL,
    handler        regprocedure DEFAULT NULL,
    if_not_exists  boolean     DEFAULT false,
    keep_completed interval    DEFAULT '0',
    keep_dead      interval    DEFAULT NULL,
    max_running    integer     DEFAULT NULL,
    group_concurrency integer  DEFAULT 1)
RETURNS void AS 'MODULE_PATHNAME', 'pgq_create_queue' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.create_queue(text, integer, interval, interval, interval, interval, boolean, real, regprocedure, boolean, interval, interval, integer, integer) IS
    'creates a queue owned by the calling role (the admin right on every queue): its default max_attempts, lease, backoff, retention, NOTIFY, rate limit, in-database handler, how long completed and dead jobs are kept, and its concurrency caps';

DROP FUNCTION pgq.alter_queue(text, integer, interval, interval, interval, interval, boolean, real, regprocedure);
CREATE FUNCTION pgq.alter_queue(
    queue          text,
    max_attempts   integer     DEFAULT NULL,
    lease          interval    DEFAULT NULL,
    backoff_base   interval    DEFAULT NULL,
    backoff_max    interval    DEFAULT NULL,
    retention      interval    DEFAULT NULL,
    notify         boolean     DEFAULT NULL,
    rate_limit     real        DEFAULT NULL,
    handler        regprocedure DEFAULT NULL,
    keep_completed interval    DEFAULT NULL,
    keep_dead      interval    DEFAULT NULL,
    max_running    integer     DEFAULT NULL,
    group_concurrency integer  DEFAULT NULL)
RETURNS void AS 'MODULE_PATHNAME', 'pgq_alter_queue' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.alter_queue(text, integer, interval, interval, interval, interval, boolean, real, regprocedure, interval, interval, integer, integer) IS
    'changes the settings given (NULL: unchanged; rate_limit => 0 and max_running => 0 remove the limit); the handler only by the queue''s owner; admin right';

DROP FUNCTION pgq.enqueue(text, jsonb, timestamptz, integer, text, integer, text);
CREATE FUNCTION pgq.enqueue(
    queue        text,
    payload      jsonb,
    run_at       timestamptz DEFAULT pg_catalog.now(),
    priority     integer     DEFAULT 0,
    dedupe_key   text        DEFAULT NULL,
    max_attempts integer     DEFAULT NULL,
    group_key    text        DEFAULT NULL,
    dedupe_for   interval    DEFAULT NULL,
    on_duplicate text        DEFAULT 'ignore',
    after        bigint[]    DEFAULT NULL)
RETURNS bigint AS 'MODULE_PATHNAME', 'pgq_enqueue' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.enqueue(text, jsonb, timestamp with time zone, integer, text, integer, text, interval, text, bigint[]) IS
    'adds a job in the caller''s transaction and returns its id; a dedupe_key held by a live job (or finished within its dedupe_for) returns the holder''s id, or with on_duplicate => ''replace'' updates a holder that has not started; with after, the job waits until those jobs are done (dead-lettered with dependency_failed if one dies); produce right (and a right on each parent''s queue)';

DROP FUNCTION pgq.enqueue_many(text, jsonb[], timestamptz, integer);
CREATE FUNCTION pgq.enqueue_many(
    queue    text,
    payloads jsonb[],
    run_at   timestamptz DEFAULT pg_catalog.now(),
    priority integer     DEFAULT 0,
    after    bigint[]    DEFAULT NULL)
RETURNS SETOF bigint AS 'MODULE_PATHNAME', 'pgq_enqueue_many' LANGUAGE C VOLATILE ROWS 100;
COMMENT ON FUNCTION pgq.enqueue_many(text, jsonb[], timestamp with time zone, integer, bigint[]) IS
    'adds one job per payload in one statement and returns their ids in input order; with after, each waits for those jobs (a fan-out behind one parent, or many children behind the same parents); produce right';

DROP FUNCTION pgq.complete(bigint, integer);
CREATE FUNCTION pgq.complete(id bigint, attempt integer, result jsonb DEFAULT NULL)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_complete' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.complete(bigint, integer, jsonb) IS
    'finishes a claimed job, keeping result with its history when the queue keeps completed jobs; false when the claim no longer holds it (fenced by attempt); consume right';

CREATE FUNCTION pgq.snooze(id bigint, attempt integer, delay interval)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_snooze' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.snooze(bigint, integer, interval) IS
    'gives a claimed job back, due after delay, without spending the attempt ("not now", not a failure); false when fenced; consume right';

CREATE FUNCTION pgq.progress(id bigint, attempt integer, progress jsonb)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_progress' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.progress(bigint, integer, jsonb) IS
    'records a running job''s progress (overwriting the last); false when fenced; consume right';

CREATE FUNCTION pgq.job(id bigint)
RETURNS SETOF pgq.job_info AS 'MODULE_PATHNAME', 'pgq_job' LANGUAGE C STABLE ROWS 1;
COMMENT ON FUNCTION pgq.job(bigint) IS
    'the job''s state and history, no row when unknown; produce or consume right on its queue (admin: without payload, progress and result)';

CREATE FUNCTION pgq.list_jobs(queue text, state text DEFAULT NULL, max integer DEFAULT 100, before_id bigint DEFAULT NULL)
RETURNS SETOF pgq.job_info AS 'MODULE_PATHNAME', 'pgq_list_jobs' LANGUAGE C STABLE ROWS 100;
COMMENT ON FUNCTION pgq.list_jobs(text, text, integer, bigint) IS
    'a queue''s jobs, newest first, max per page (next page: before_id => the last id); rights as pgq.job';

CREATE FUNCTION pgq.purge_dead(queue text, older_than interval DEFAULT '0')
RETURNS bigint AS 'MODULE_PATHNAME', 'pgq_purge_dead' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.purge_dead(text, interval) IS
    'deletes the queue''s dead jobs that died more than older_than ago; how many; admin right';

-- queue_metrics gains the same two columns (postgres_exporter reads them
-- by name).
DROP FUNCTION pgq.queue_metrics();
CREATE FUNCTION pgq.queue_metrics(
    OUT queue text, OUT ready bigint, OUT scheduled bigint, OUT running bigint,
    OUT expired bigint, OUT dead bigint, OUT oldest_ready_seconds double precision,
    OUT paused boolean, OUT claims bigint, OUT completions bigint, OUT failures bigint,
    OUT lease_expiries bigint, OUT dead_lettered bigint, OUT max_running integer,
    OUT awaiting_parents bigint)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'pgq_queue_metrics' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.queue_metrics() IS
    'one row per queue: jobs by state, age of the oldest ready job, the counters since the server started (NULL without preload), the queue''s max_running and its jobs waiting for their parents';
REVOKE EXECUTE ON FUNCTION pgq.queue_metrics() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgq.queue_metrics() TO pg_monitor;

-- The counters alone: what a dashboard samples for its rates, without the
-- gauges' count of every job.
CREATE FUNCTION pgq.queue_counters(
    OUT queue text, OUT claims bigint, OUT completions bigint, OUT failures bigint,
    OUT lease_expiries bigint, OUT dead_lettered bigint)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'pgq_queue_counters' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.queue_counters() IS
    'one row per queue: the counters of queue_metrics() (claims, completions, failed attempts, lease expiries, jobs dead-lettered since the server started) without its counts of jobs; no row without preload';
REVOKE EXECUTE ON FUNCTION pgq.queue_counters() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgq.queue_counters() TO pg_monitor;

CREATE FUNCTION pgq.claim(
    queues text[],
    n      integer  DEFAULT 1,
    lease  interval DEFAULT NULL,
    wait   interval DEFAULT '0')
RETURNS SETOF pgq.claimed_job AS 'MODULE_PATHNAME', 'pgq_claim_queues' LANGUAGE C VOLATILE ROWS 10;
COMMENT ON FUNCTION pgq.claim(text[], integer, interval, interval) IS
    'leases up to n ready jobs from any of the queues, in claim order across them, each queue''s lease, rate limit and caps applying; with wait, blocks until one of them has a job or the wait ends; consume right on each';

-- queue_stats as in 1.1, but the age of the oldest ready job leaves out a
-- row it could not subtract, so no stored row can make the view fail; jobs
-- waiting for their parents are neither ready nor scheduled but counted
-- apart (awaiting_parents), beside the queue's max_running.
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
       q.paused,
       q.max_running,
       COALESCE(j.awaiting_parents, 0)          AS awaiting_parents
  FROM pgq.queues q
 CROSS JOIN (SELECT pgq.clock() AS now) c
  LEFT JOIN (
        SELECT jj.queue_id,
               pg_catalog.count(*) FILTER (WHERE jj.state OPERATOR(pg_catalog.<>) ALL ('{r,b}'::pg_catalog."char"[])
                                             AND jj.run_at OPERATOR(pg_catalog.<=) cc.now) AS ready,
               pg_catalog.count(*) FILTER (WHERE jj.state OPERATOR(pg_catalog.<>) ALL ('{r,b}'::pg_catalog."char"[])
                                             AND jj.run_at OPERATOR(pg_catalog.>) cc.now)  AS scheduled,
               pg_catalog.count(*) FILTER (WHERE jj.state OPERATOR(pg_catalog.=) 'r')       AS running,
               pg_catalog.count(*) FILTER (WHERE jj.state OPERATOR(pg_catalog.=) 'r'
                                             AND jj.lease_until OPERATOR(pg_catalog.<) cc.now) AS expired,
               pg_catalog.min(jj.run_at) FILTER (WHERE jj.state OPERATOR(pg_catalog.<>) ALL ('{r,b}'::pg_catalog."char"[])
                                             AND jj.run_at OPERATOR(pg_catalog.<=) cc.now
                                             AND pg_catalog.isfinite(jj.run_at)) AS oldest_ready,
               pg_catalog.count(*) FILTER (WHERE jj.state OPERATOR(pg_catalog.=) 'b')       AS awaiting_parents
          FROM pgq.jobs jj CROSS JOIN (SELECT pgq.clock() AS now) cc
         GROUP BY jj.queue_id
       ) j ON j.queue_id OPERATOR(pg_catalog.=) q.queue_id
 WHERE pgq.has_queue_privilege(q.name, 'produce, consume, admin');

-- The dashboard's overview: queue_stats' columns at a cost that does not
-- grow with the queues' depth (ADR 0018). Rights as queue_stats.
CREATE FUNCTION pgq.queue_overview(
    exact_up_to integer DEFAULT 1000,
    OUT queue text, OUT ready bigint, OUT scheduled bigint, OUT running bigint,
    OUT expired bigint, OUT dead bigint, OUT done_recent bigint, OUT oldest_ready_age interval,
    OUT paused boolean, OUT max_running integer, OUT awaiting_parents bigint,
    OUT estimated boolean)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'pgq_queue_overview' LANGUAGE C STABLE ROWS 20;
COMMENT ON FUNCTION pgq.queue_overview(integer) IS
    'one row per queue the caller holds a right on, as pgq.queue_stats, each count exact up to exact_up_to and estimated from the planner''s statistics past it (estimated: true); for dashboards polling deep queues';

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
-- publish gains group_key (SPEC §9): copied to every subscriber job, so a
-- relay's queue keeps one job per key in flight, in commit order.
DROP FUNCTION pgq.publish(text, jsonb, text);
CREATE FUNCTION pgq.publish(topic text, payload jsonb, dedupe_key text DEFAULT NULL,
                            group_key text DEFAULT NULL)
RETURNS bigint AS 'MODULE_PATHNAME', 'pgq_publish' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.publish(text, jsonb, text, text) IS
    'records an event and enqueues one job per subscribed queue in the caller''s transaction; with group_key, each job joins that FIFO group of its queue (one per key in flight, in commit order); publish right on the topic';

-- Every function, view and table says what it is (issue 16): \df+ and \d+
-- in psql, and tools that read the catalog, show it. test_reference.py
-- checks that none lacks one.

COMMENT ON FUNCTION pgq.drop_queue(text, boolean) IS
    'drops a queue; refuses while it holds pending, running or dead jobs unless force; admin right';
COMMENT ON FUNCTION pgq.pause(text) IS
    'stops claims from the queue (enqueues still accepted); returns the stored paused flag; admin right';
COMMENT ON FUNCTION pgq.resume(text) IS
    'lets claims take jobs from the queue again; returns the stored paused flag; admin right';
COMMENT ON FUNCTION pgq.claim(text, integer, interval, interval) IS
    'leases up to n ready jobs (priority, then run_at, then id) in the same statement that selects them; with wait, blocks until one is enqueued or the wait ends; consume right';
COMMENT ON FUNCTION pgq.complete_many(bigint[], integer[]) IS
    'finishes several claimed jobs in one statement; how many were still held; consume right';
COMMENT ON FUNCTION pgq.fail(bigint, integer, text, interval) IS
    'records a failed attempt: ''retry'' after the backoff (or retry_in), ''dead'' when attempts are exhausted, ''lost'' when fenced; consume right';
COMMENT ON FUNCTION pgq.extend(bigint, integer, interval) IS
    'extends a claim''s lease (heartbeat); the new lease_until, or NULL when the claim no longer holds; consume right';
COMMENT ON FUNCTION pgq.release(bigint, integer) IS
    'gives a claimed job back now without counting the attempt (graceful shutdown); consume right';
COMMENT ON FUNCTION pgq.cancel(bigint) IS
    'moves a pending, waiting or running job to dead-letter with reason cancelled (a running one''s claim is fenced at once); produce or admin right';
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
