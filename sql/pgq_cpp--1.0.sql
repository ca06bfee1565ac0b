-- pgq_cpp 1.0: a durable job queue inside PostgreSQL.
--
-- Released and frozen: later changes go into update scripts
-- (pgq_cpp--1.0--1.1.sql, ...), never into this file.
--
-- Hardening: CREATE EXTENSION runs this script with search_path set to
-- pg_catalog only (the control file's schema), every object of ours is
-- qualified with pgq., and the schema is created here, so an existing schema
-- pgq (Skytools PgQ's, or one planted by another role) is refused, never
-- adopted.

\echo Use "CREATE EXTENSION pgq_cpp" to load this file. \quit

DO $refuse_existing_schema$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_namespace
               WHERE nspname OPERATOR(pg_catalog.=) 'pgq') THEN
        RAISE EXCEPTION 'schema "pgq" already exists'
            USING ERRCODE = 'duplicate_schema',
                  DETAIL = 'pgq_cpp creates its own schema "pgq" and never adopts an existing one. '
                           'The Skytools PgQ extension uses the same schema name; the two cannot share a database.',
                  HINT = 'Drop or rename the existing schema "pgq", or install pgq_cpp in another database.';
    END IF;
END
$refuse_existing_schema$;

CREATE SCHEMA pgq;
COMMENT ON SCHEMA pgq IS 'pgq_cpp: durable job queue';

-- Queues ------------------------------------------------------------------

CREATE SEQUENCE pgq.queue_id_seq AS integer;

CREATE TABLE pgq.queues (
    queue_id     integer     NOT NULL DEFAULT pg_catalog.nextval('pgq.queue_id_seq') PRIMARY KEY,
    name         text        NOT NULL UNIQUE,
    max_attempts integer     NOT NULL,
    lease        interval    NOT NULL,
    backoff_base interval    NOT NULL,
    backoff_max  interval    NOT NULL,
    retention    interval    NOT NULL,
    notify       boolean     NOT NULL,
    rate_limit   real,                   -- claims per second, NULL: no limit
    handler      text,                   -- in-database handler, as regprocedure text
    owner        name        NOT NULL DEFAULT CURRENT_USER,  -- handlers run as this role
    paused       boolean     NOT NULL DEFAULT false,
    created_at   timestamptz NOT NULL DEFAULT pg_catalog.now()
);
ALTER SEQUENCE pgq.queue_id_seq OWNED BY pgq.queues.queue_id;

-- Jobs: the hot table. It holds only live jobs: pending ('p'), running
-- ('r') and waiting behind the head of their FIFO group ('w'); finished jobs
-- leave it (see docs/adr/0002-job-storage.md and 0007-claim-hint.md).

CREATE SEQUENCE pgq.job_id_seq AS bigint;

CREATE TABLE pgq.jobs (
    id           bigint      NOT NULL PRIMARY KEY,
    queue_id     integer     NOT NULL,
    state        "char"      NOT NULL,      -- 'p' pending, 'r' running, 'w' waiting in its group
    priority     integer     NOT NULL,      -- above -2147483648: jobs_ready_idx negates it
    run_at       timestamptz NOT NULL,
    attempt      integer     NOT NULL,      -- claims so far, counting the current one
    max_attempts integer     NOT NULL,
    lease_until  timestamptz,               -- set while running; kept after a lease expiry
    enqueued_at  timestamptz NOT NULL,
    dedupe_key   text,
    group_key    text,                      -- FIFO group: one job of a group is not 'w'
    last_error   text,
    payload      jsonb       NOT NULL,
    CONSTRAINT jobs_state_check CHECK (state OPERATOR(pg_catalog.=) ANY (ARRAY['p', 'r', 'w']::"char"[]))
) WITH (fillfactor = 90);
ALTER SEQUENCE pgq.job_id_seq OWNED BY pgq.jobs.id;

-- What claim reads: pending jobs of one queue in claim order (priority
-- descending, written as an ascending (- priority) so that a claim can start
-- its scan at a key with one row comparison: the claim hint).
CREATE INDEX jobs_ready_idx ON pgq.jobs (queue_id, (OPERATOR(pg_catalog.-) priority), run_at, id)
    WHERE state OPERATOR(pg_catalog.=) 'p';
-- What maintenance reads: running jobs by lease end.
CREATE INDEX jobs_lease_idx ON pgq.jobs (lease_until)
    WHERE state OPERATOR(pg_catalog.=) 'r';
-- One pending or running job per dedupe key and queue.
CREATE UNIQUE INDEX jobs_dedupe_idx ON pgq.jobs (queue_id, dedupe_key)
    WHERE dedupe_key IS NOT NULL;
-- A group's jobs in enqueue order: who is next when the head leaves.
CREATE INDEX jobs_group_idx ON pgq.jobs (queue_id, group_key, id)
    WHERE group_key IS NOT NULL;

-- Rate-limit buckets of queues with a rate_limit, when the library is not
-- preloaded (preloaded, they live in shared memory). One row per queue,
-- updated under its row lock by every claim of that queue.
CREATE TABLE pgq.rate_buckets (
    queue_id   integer          NOT NULL PRIMARY KEY REFERENCES pgq.queues ON DELETE CASCADE,
    tokens     double precision NOT NULL,
    updated_at timestamptz      NOT NULL
);

-- Dead-letter: the job kept whole, with why it died.
CREATE TABLE pgq.dead_jobs (
    id           bigint      NOT NULL PRIMARY KEY,
    queue        text        NOT NULL,
    payload      jsonb       NOT NULL,
    attempts     integer     NOT NULL,
    last_error   text,
    reason       text        NOT NULL CHECK (reason OPERATOR(pg_catalog.=) ANY (ARRAY['exhausted', 'cancelled', 'expired'])),
    died_at      timestamptz NOT NULL,
    priority     integer     NOT NULL,
    max_attempts integer     NOT NULL,
    enqueued_at  timestamptz NOT NULL,
    dedupe_key   text,
    group_key    text
);
CREATE INDEX dead_jobs_queue_idx ON pgq.dead_jobs (queue, id);

-- How many jobs of a queue each completing statement finished, and when:
-- what queue_stats.done_recent counts, kept for the queue's retention. One
-- row per statement and queue, not per job, so completing a batch of 100
-- costs one small insert; append-only and BRIN-indexed by time. When the
-- library is preloaded, single completions are counted in shared memory
-- instead and written here by the maintenance pass, one row per queue
-- (pgq.unflushed_completions has the rest).
CREATE TABLE pgq.finished (
    queue_id    integer     NOT NULL,
    finished_at timestamptz NOT NULL,
    jobs        integer     NOT NULL
);
CREATE INDEX finished_at_idx ON pgq.finished USING brin (finished_at);


-- Coordination (SPEC section 4): teams taking turns, assignments, switches,
-- ladders and once keys. See docs/coordination.md.

CREATE SEQUENCE pgq.team_id_seq AS integer;

-- turn counts the turns spent; last_member_id is the cursor of the rotation
-- (src/core/turns.h): the next turn goes to the first active member above it.
CREATE TABLE pgq.teams (
    team_id        integer     NOT NULL DEFAULT pg_catalog.nextval('pgq.team_id_seq') PRIMARY KEY,
    name           text        NOT NULL UNIQUE,
    turn           bigint      NOT NULL DEFAULT 0,
    last_member_id bigint      NOT NULL DEFAULT 0,
    created_at     timestamptz NOT NULL DEFAULT pg_catalog.now()
);
ALTER SEQUENCE pgq.team_id_seq OWNED BY pgq.teams.team_id;

-- member_id is the stable id that orders turns: never reused, never changed.
CREATE SEQUENCE pgq.member_id_seq AS bigint;

CREATE TABLE pgq.team_members (
    member_id  bigint      NOT NULL DEFAULT pg_catalog.nextval('pgq.member_id_seq') PRIMARY KEY,
    team_id    integer     NOT NULL REFERENCES pgq.teams ON DELETE CASCADE,
    name       text        NOT NULL,
    active     boolean     NOT NULL DEFAULT true,
    added_at   timestamptz NOT NULL DEFAULT pg_catalog.now(),
    UNIQUE (team_id, name)
);
ALTER SEQUENCE pgq.member_id_seq OWNED BY pgq.team_members.member_id;
CREATE INDEX team_members_turn_idx ON pgq.team_members (team_id, member_id) WHERE active;

-- The owner is kept by name and id: it stays the owner after the member
-- leaves the team (reassigning is the application's decision).
CREATE TABLE pgq.assignments (
    team_id     integer     NOT NULL REFERENCES pgq.teams ON DELETE CASCADE,
    subject     text        NOT NULL,
    member_id   bigint      NOT NULL,
    owner       text        NOT NULL,
    turn        bigint      NOT NULL,
    assigned_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (team_id, subject)
);

CREATE TABLE pgq.switches (
    name       text        NOT NULL PRIMARY KEY,
    value      boolean     NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);

CREATE TABLE pgq.ladders (
    subject    text        NOT NULL PRIMARY KEY,
    step       integer     NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);

-- Kept until you delete them (for example, keys older than your handlers'
-- longest retry window).
CREATE TABLE pgq.once_keys (
    key        text        NOT NULL PRIMARY KEY,
    first_at   timestamptz NOT NULL DEFAULT pg_catalog.now()
);


-- Recurring jobs and the outbox (SPEC section 5). See
-- docs/schedules-and-outbox.md.

-- A schedule. next_run_at is the slot to fire next; NULL for an @every
-- schedule whose last run is still pending or running (its next slot is one
-- interval after that run finishes). Dropping the queue drops its schedules.
CREATE TABLE pgq.recurring (
    name        text        NOT NULL PRIMARY KEY,
    queue_id    integer     NOT NULL REFERENCES pgq.queues ON DELETE CASCADE,
    spec        text        NOT NULL,
    every       interval,               -- @every <interval>: the fixed delay
    timezone    text        NOT NULL,
    payload     jsonb       NOT NULL,
    next_run_at timestamptz,
    last_run_at timestamptz,
    last_job_id bigint,
    created_at  timestamptz NOT NULL DEFAULT pg_catalog.now()
);
CREATE INDEX recurring_due_idx ON pgq.recurring (next_run_at);

-- One row per firing, kept for the queue's retention.
CREATE TABLE pgq.schedule_runs (
    name     text        NOT NULL REFERENCES pgq.recurring ON DELETE CASCADE,
    slot     timestamptz NOT NULL,   -- the slot that was due
    fired_at timestamptz NOT NULL,
    job_id   bigint      NOT NULL
);
CREATE INDEX schedule_runs_name_idx ON pgq.schedule_runs (name, fired_at);

CREATE TABLE pgq.subscriptions (
    topic      text        NOT NULL,
    queue_id   integer     NOT NULL REFERENCES pgq.queues ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (topic, queue_id)
);

-- Published events: the record that the business change committed. The
-- jobs carry the payload to each subscriber; events are kept for the
-- longest retention of any queue.
CREATE SEQUENCE pgq.event_id_seq AS bigint;

CREATE TABLE pgq.events (
    id           bigint      NOT NULL DEFAULT pg_catalog.nextval('pgq.event_id_seq') PRIMARY KEY,
    topic        text        NOT NULL,
    payload      jsonb       NOT NULL,
    dedupe_key   text,
    published_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
ALTER SEQUENCE pgq.event_id_seq OWNED BY pgq.events.id;
CREATE UNIQUE INDEX events_dedupe_idx ON pgq.events (topic, dedupe_key)
    WHERE dedupe_key IS NOT NULL;
CREATE INDEX events_published_idx ON pgq.events USING brin (published_at);

-- Queue state is user data: pg_dump must keep it.
SELECT pg_catalog.pg_extension_config_dump('pgq.queues', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.queue_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.jobs', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.job_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.dead_jobs', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.finished', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.rate_buckets', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.teams', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.team_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.team_members', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.member_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.assignments', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.switches', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.ladders', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.once_keys', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.recurring', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.schedule_runs', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.subscriptions', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.events', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.event_id_seq', '');

CREATE TYPE pgq.claimed_job AS (
    id           bigint,
    queue        text,
    payload      jsonb,
    attempt      integer,
    max_attempts integer,
    lease_until  timestamptz,
    enqueued_at  timestamptz,
    priority     integer
);

-- Clock --------------------------------------------------------------------

CREATE FUNCTION pgq.clock() RETURNS timestamptz
    AS 'MODULE_PATHNAME', 'pgq_clock' LANGUAGE C VOLATILE PARALLEL SAFE;
COMMENT ON FUNCTION pgq.clock() IS
    'the time pgq uses for leases and readiness: the wall clock, shifted by pgq.debug_clock_offset';

CREATE FUNCTION pgq.unflushed_completions(queue_id integer) RETURNS bigint
    AS 'MODULE_PATHNAME', 'pgq_unflushed_completions' LANGUAGE C VOLATILE PARALLEL SAFE;
COMMENT ON FUNCTION pgq.unflushed_completions(integer) IS
    'completions of the queue counted in shared memory and not yet written to pgq.finished (internal, for queue_stats)';

-- Queues -------------------------------------------------------------------

CREATE FUNCTION pgq.create_queue(
    queue         text,
    max_attempts  integer     DEFAULT 5,
    lease         interval    DEFAULT '2 minutes',
    backoff_base  interval    DEFAULT '1 second',
    backoff_max   interval    DEFAULT '1 hour',
    retention     interval    DEFAULT '1 day',
    notify        boolean     DEFAULT false,
    rate_limit    real        DEFAULT NULL,
    handler       regprocedure DEFAULT NULL,
    if_not_exists boolean     DEFAULT false)
RETURNS void AS 'MODULE_PATHNAME', 'pgq_create_queue' LANGUAGE C VOLATILE;

CREATE FUNCTION pgq.alter_queue(
    queue         text,
    max_attempts  integer     DEFAULT NULL,
    lease         interval    DEFAULT NULL,
    backoff_base  interval    DEFAULT NULL,
    backoff_max   interval    DEFAULT NULL,
    retention     interval    DEFAULT NULL,
    notify        boolean     DEFAULT NULL,
    rate_limit    real        DEFAULT NULL,
    handler       regprocedure DEFAULT NULL)
RETURNS void AS 'MODULE_PATHNAME', 'pgq_alter_queue' LANGUAGE C VOLATILE;

CREATE FUNCTION pgq.drop_queue(queue text, force boolean DEFAULT false)
RETURNS void AS 'MODULE_PATHNAME', 'pgq_drop_queue' LANGUAGE C VOLATILE;

CREATE FUNCTION pgq.pause(queue text)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_pause' LANGUAGE C VOLATILE;

CREATE FUNCTION pgq.resume(queue text)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_resume' LANGUAGE C VOLATILE;

-- Jobs ---------------------------------------------------------------------

CREATE FUNCTION pgq.enqueue(
    queue        text,
    payload      jsonb,
    run_at       timestamptz DEFAULT pg_catalog.now(),
    priority     integer     DEFAULT 0,
    dedupe_key   text        DEFAULT NULL,
    max_attempts integer     DEFAULT NULL,
    group_key    text        DEFAULT NULL)
RETURNS bigint AS 'MODULE_PATHNAME', 'pgq_enqueue' LANGUAGE C VOLATILE;

CREATE FUNCTION pgq.enqueue_many(
    queue    text,
    payloads jsonb[],
    run_at   timestamptz DEFAULT pg_catalog.now(),
    priority integer     DEFAULT 0)
RETURNS SETOF bigint AS 'MODULE_PATHNAME', 'pgq_enqueue_many' LANGUAGE C VOLATILE ROWS 100;

CREATE FUNCTION pgq.claim(
    queue text,
    n     integer  DEFAULT 1,
    lease interval DEFAULT NULL,
    wait  interval DEFAULT '0')
RETURNS SETOF pgq.claimed_job AS 'MODULE_PATHNAME', 'pgq_claim' LANGUAGE C VOLATILE ROWS 10;

CREATE FUNCTION pgq.complete(id bigint, attempt integer)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_complete' LANGUAGE C VOLATILE;

CREATE FUNCTION pgq.complete_many(ids bigint[], attempts integer[])
RETURNS integer AS 'MODULE_PATHNAME', 'pgq_complete_many' LANGUAGE C VOLATILE;

CREATE FUNCTION pgq.fail(id bigint, attempt integer, error text DEFAULT NULL, retry_in interval DEFAULT NULL)
RETURNS text AS 'MODULE_PATHNAME', 'pgq_fail' LANGUAGE C VOLATILE;

CREATE FUNCTION pgq.extend(id bigint, attempt integer, lease interval)
RETURNS timestamptz AS 'MODULE_PATHNAME', 'pgq_extend' LANGUAGE C VOLATILE;

CREATE FUNCTION pgq.release(id bigint, attempt integer)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_release' LANGUAGE C VOLATILE;

CREATE FUNCTION pgq.cancel(id bigint)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_cancel' LANGUAGE C VOLATILE;

CREATE FUNCTION pgq.retry_dead(id bigint)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_retry_dead' LANGUAGE C VOLATILE;

CREATE FUNCTION pgq.retry_dead(queue text, max integer DEFAULT 1000)
RETURNS integer AS 'MODULE_PATHNAME', 'pgq_retry_dead_queue' LANGUAGE C VOLATILE;

CREATE FUNCTION pgq.maintain(
    OUT expired_requeued bigint,
    OUT expired_dead     bigint,
    OUT finished_dropped bigint,
    OUT schedules_fired  bigint)
RETURNS record AS 'MODULE_PATHNAME', 'pgq_maintain' LANGUAGE C VOLATILE;

-- Rewrites pgq.jobs with only its live jobs (ADR 0008); the maintenance pass
-- does it by itself past pgq.compact_min_size. NULL: the table stayed busy.
CREATE FUNCTION pgq.compact_jobs()
RETURNS bigint AS 'MODULE_PATHNAME', 'pgq_compact_jobs' LANGUAGE C VOLATILE;

-- Coordination -------------------------------------------------------------

CREATE FUNCTION pgq.add_member(team text, member text)
RETURNS bigint AS 'MODULE_PATHNAME', 'pgq_add_member' LANGUAGE C VOLATILE;

CREATE FUNCTION pgq.set_member_active(team text, member text, active boolean)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_set_member_active' LANGUAGE C VOLATILE;

CREATE FUNCTION pgq.remove_member(team text, member text)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_remove_member' LANGUAGE C VOLATILE;

CREATE FUNCTION pgq.next_turn(team text)
RETURNS text AS 'MODULE_PATHNAME', 'pgq_next_turn' LANGUAGE C VOLATILE;

CREATE FUNCTION pgq.assign(team text, subject text)
RETURNS text AS 'MODULE_PATHNAME', 'pgq_assign' LANGUAGE C VOLATILE;

CREATE FUNCTION pgq.set_switch(name text, value boolean)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_set_switch' LANGUAGE C VOLATILE;

CREATE FUNCTION pgq.switch(name text)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_switch' LANGUAGE C STABLE;

CREATE FUNCTION pgq.advance(subject text, step integer)
RETURNS integer AS 'MODULE_PATHNAME', 'pgq_advance' LANGUAGE C VOLATILE;

CREATE FUNCTION pgq.once(key text)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_once' LANGUAGE C VOLATILE;

-- Recurring jobs and the outbox ---------------------------------------------

CREATE FUNCTION pgq.schedule(
    name     text,
    queue    text,
    spec     text,
    payload  jsonb DEFAULT '{}',
    timezone text  DEFAULT 'UTC')
RETURNS void AS 'MODULE_PATHNAME', 'pgq_schedule' LANGUAGE C VOLATILE;

CREATE FUNCTION pgq.unschedule(name text)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_unschedule' LANGUAGE C VOLATILE;

CREATE FUNCTION pgq.subscribe(topic text, queue text)
RETURNS void AS 'MODULE_PATHNAME', 'pgq_subscribe' LANGUAGE C VOLATILE;

CREATE FUNCTION pgq.unsubscribe(topic text, queue text)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_unsubscribe' LANGUAGE C VOLATILE;

CREATE FUNCTION pgq.publish(topic text, payload jsonb, dedupe_key text DEFAULT NULL)
RETURNS bigint AS 'MODULE_PATHNAME', 'pgq_publish' LANGUAGE C VOLATILE;

-- Views --------------------------------------------------------------------

CREATE VIEW pgq.queue_stats AS
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
                                             AND jj.run_at OPERATOR(pg_catalog.<=) cc.now) AS oldest_ready
          FROM pgq.jobs jj CROSS JOIN (SELECT pgq.clock() AS now) cc
         GROUP BY jj.queue_id
       ) j ON j.queue_id OPERATOR(pg_catalog.=) q.queue_id;

COMMENT ON VIEW pgq.queue_stats IS 'one row per queue: ready (including jobs waiting behind the head of their FIFO group), scheduled, running, expired, dead, done_recent, oldest_ready_age, paused';

CREATE VIEW pgq.schedules AS
SELECT r.name, q.name AS queue, r.spec, r.next_run_at, r.last_run_at, r.last_job_id,
       (r.last_job_id IS NOT NULL AND EXISTS (
            SELECT 1 FROM pgq.jobs j WHERE j.id OPERATOR(pg_catalog.=) r.last_job_id)) AS running,
       r.timezone, r.payload
  FROM pgq.recurring r
  JOIN pgq.queues q ON q.queue_id OPERATOR(pg_catalog.=) r.queue_id;

COMMENT ON VIEW pgq.schedules IS 'one row per schedule: its next slot, its last run and whether that run is still pending or running';
