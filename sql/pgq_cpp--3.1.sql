-- pgq_cpp 3.1: a durable job queue inside PostgreSQL. The full install
-- script of the current release (issue 32, ADR 0024): CREATE EXTENSION
-- pgq_cpp runs this file alone. The update scripts (pgq_cpp--1.0.sql and
-- pgq_cpp--A--B.sql) are kept for databases that installed an earlier
-- release and run ALTER EXTENSION pgq_cpp UPDATE.
--
-- A change to the extension's SQL objects goes into both: into this file as
-- the objects' final form (a table with its new column in its place, a
-- function as it now is), and into the update script from the last release
-- as the ALTER, DROP and CREATE that bring an installed database there.
-- test/t/009_upgrade.pl proves that a fresh install and an update from every
-- release give the same catalog (objects, columns and their order, indexes,
-- constraints, privileges, comments, configuration-dump entries and the
-- rows of the ring ledger).
--
-- Hardening: CREATE EXTENSION runs this script with search_path set to
-- pg_catalog only (the control file's schema), every object of ours is
-- qualified with pgq. and every operator with OPERATOR(pg_catalog.x), and
-- the schema is created here, so an existing schema pgq (Skytools PgQ's, or
-- one planted by another role) is refused, never adopted.

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

-- Every role may call the functions that check a queue right themselves
-- (the documented list in docs/security.md; test/python/test_privileges.py
-- checks that each of them refuses a role without one). The coordination
-- primitives are not about queues: they are PostgreSQL's to grant, with
-- GRANT EXECUTE, and nobody's until then (see the end of this file).
GRANT USAGE ON SCHEMA pgq TO PUBLIC;


-- Queues ===================================================================

CREATE SEQUENCE pgq.queue_id_seq AS integer;

-- keep_completed, keep_dead: completed jobs are kept keep_completed (0: not
-- kept), dead jobs keep_dead (NULL: until retried or purged); SPEC §8.
-- dedupe_periods: some job of the queue was enqueued with a dedupe_for, so
-- that its enqueues with a dedupe key look at pgq.dedupe_holds (set by that
-- enqueue; the others pay nothing until then).
-- max_running, group_concurrency: at most max_running jobs of the queue
-- running at once (NULL: no cap), at most group_concurrency of one FIFO
-- group (1: strict FIFO); docs/workflows.md.
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
    created_at   timestamptz NOT NULL DEFAULT pg_catalog.now(),
    keep_completed    interval NOT NULL DEFAULT '0',
    keep_dead         interval,
    dedupe_periods    boolean  NOT NULL DEFAULT false,
    max_running       integer,
    group_concurrency integer  NOT NULL DEFAULT 1
);
ALTER SEQUENCE pgq.queue_id_seq OWNED BY pgq.queues.queue_id;
COMMENT ON TABLE pgq.queues IS 'the queues and their settings; written by create_queue, alter_queue, pause, resume, drop_queue';

-- Rate-limit buckets of queues with a rate_limit, when the library is not
-- preloaded (preloaded, they live in shared memory). One row per queue,
-- updated under its row lock by every claim of that queue.
CREATE TABLE pgq.rate_buckets (
    queue_id   integer          NOT NULL PRIMARY KEY REFERENCES pgq.queues ON DELETE CASCADE,
    tokens     double precision NOT NULL,
    updated_at timestamptz      NOT NULL
);
COMMENT ON TABLE pgq.rate_buckets IS 'token buckets of rate-limited queues when pgq_cpp is not preloaded (else in shared memory)';


-- Jobs =====================================================================

-- The hot table. It holds only live jobs: pending ('p'), running ('r'),
-- waiting behind the head of their FIFO group ('w') and waiting for their
-- parents ('b'); finished jobs leave it (see docs/adr/0002-job-storage.md
-- and 0007-claim-hint.md).
--
-- The state rule is written as a constant array (issue 16): PostgreSQL
-- reads and simplifies a CHECK expression again for every statement that
-- inserts or updates the table, and an ARRAY[...] of literals is folded
-- into a constant each time (3 of the 17 microseconds of an enqueue). A
-- constant array costs nothing.
--
-- claimed_by, claimed_at: who holds a running job, the claiming backend's
-- pid and when it claimed (set by every claim; pgq.running_jobs shows them).
-- progress: a running job's progress (pgq.progress); dedupe_for: how long
-- its dedupe key stays taken after it finished (enqueue's dedupe_for).
-- open_parents, has_dependents (enqueue's after; docs/workflows.md): a job
-- waiting for its parents is in state 'b', outside the ready index, with
-- open_parents the number not yet done; a parent is marked has_dependents
-- (NULL: none) by the first child enqueued after it, so that only the
-- completions of parents look for children. Both NULL on every other row.
CREATE SEQUENCE pgq.job_id_seq AS bigint;

CREATE TABLE pgq.job_rows (
    id           bigint      NOT NULL PRIMARY KEY,
    queue_id     integer     NOT NULL,
    state        "char"      NOT NULL,      -- 'p' pending, 'r' running, 'w' waiting in its group, 'b' for its parents
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
    claimed_by   integer,
    claimed_at   timestamptz,
    progress     jsonb,
    dedupe_for   interval,
    open_parents   integer,
    has_dependents boolean,
    trace_context  text,                    -- W3C traceparent[;tracestate] (ADR 0030); NULL: none
    trace_links    text[],                  -- enqueue's after: the traced parents' traceparents
    CONSTRAINT jobs_state_check
        CHECK (state OPERATOR(pg_catalog.=) ANY ('{p,r,w,b}'::pg_catalog."char"[]))
) WITH (fillfactor = 90);
ALTER SEQUENCE pgq.job_id_seq OWNED BY pgq.job_rows.id;
COMMENT ON TABLE pgq.job_rows IS 'the jobs kept as rows, every job not on a ring: pending, waiting and running (finished jobs leave it); pgq.jobs shows them with the rings'' jobs';

-- What claim reads: pending jobs of one queue in claim order (priority
-- descending, written as an ascending (- priority) so that a claim can start
-- its scan at a key with one row comparison: the claim hint).
CREATE INDEX jobs_ready_idx ON pgq.job_rows (queue_id, (OPERATOR(pg_catalog.-) priority), run_at, id)
    WHERE state OPERATOR(pg_catalog.=) 'p';
-- Running jobs by queue and lease end: a capped claim counts its queue's
-- running jobs, and maintenance finds expired leases queue by queue.
CREATE INDEX jobs_lease_idx ON pgq.job_rows (queue_id, lease_until)
    WHERE state OPERATOR(pg_catalog.=) 'r';
-- One pending or running job per dedupe key and queue.
CREATE UNIQUE INDEX jobs_dedupe_idx ON pgq.job_rows (queue_id, dedupe_key)
    WHERE dedupe_key IS NOT NULL;
-- A group's jobs in enqueue order: who is next when the head leaves.
CREATE INDEX jobs_group_idx ON pgq.job_rows (queue_id, group_key, id)
    WHERE group_key IS NOT NULL;
-- A group's jobs that hold a place in it (pending or running): the room it
-- has when one leaves (store/groups.cpp), found without reading its
-- waiting jobs (through jobs_group_idx, a group with a deep backlog made
-- every completion of it read the whole backlog).
CREATE INDEX jobs_group_live_idx ON pgq.job_rows (queue_id, group_key)
    WHERE group_key IS NOT NULL AND state OPERATOR(pg_catalog.=) ANY ('{p,r}'::pg_catalog."char"[]);
-- Jobs that wait (behind their FIFO group's head, or for their parents) by
-- queue and state: pgq.queue_overview counts them without reading the
-- table. Only waiting jobs are in it.
CREATE INDEX jobs_parked_idx ON pgq.job_rows (queue_id, state)
    WHERE state OPERATOR(pg_catalog.=) ANY ('{w,b}'::pg_catalog."char"[]);

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
COMMENT ON TABLE pgq.finished IS 'completion counts per queue, written by maintenance (one row per queue and pass), for queue_stats.done_recent';

-- Dependencies (enqueue's after; docs/workflows.md): one row per (parent,
-- child) not yet settled, deleted when the parent completes (the child's
-- open_parents goes down) or dies (the child dies with reason
-- dependency_failed). The parents of a job are found by child_id.
CREATE TABLE pgq.job_dependencies (
    parent_id bigint NOT NULL,
    child_id  bigint NOT NULL,
    PRIMARY KEY (parent_id, child_id)
);
CREATE INDEX job_dependencies_child_idx ON pgq.job_dependencies (child_id);
COMMENT ON TABLE pgq.job_dependencies IS
    'which waiting job waits for which parent (enqueue''s after); a row leaves when its parent completes or dies';

-- Parents that died with children left to dead-letter: the transaction in
-- which a parent dies does a bounded part, maintenance the rest.
CREATE TABLE pgq.dependency_failures (
    parent_id bigint      NOT NULL PRIMARY KEY,
    failed_at timestamptz NOT NULL
);
COMMENT ON TABLE pgq.dependency_failures IS
    'parents that died (dead or cancelled) whose dependents are still being dead-lettered (dependency_failed)';

-- A parent's completion releases a bounded number of its dependents in its
-- own transaction (as a parent's death dead-letters a bounded number); a
-- parent with more left is recorded here and maintenance releases the rest
-- in batches (src/store/dependencies.cpp; issue 30, D4).
CREATE TABLE pgq.dependency_releases (
    parent_id bigint      NOT NULL PRIMARY KEY,
    done_at   timestamptz NOT NULL
);
COMMENT ON TABLE pgq.dependency_releases IS
    'parents that completed whose dependents are still being released (made ready) by maintenance';

-- A job enqueued with on_duplicate => 'replace' while its key's holder runs
-- waits here, outside the hot table (whose every index each enqueue and
-- claim pays for), one per key, and moves into pgq.job_rows under its id, pending
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
    trace_context text,                  -- its enqueuer's trace (ADR 0030)
    PRIMARY KEY (queue_id, dedupe_key)
);
COMMENT ON TABLE pgq.dedupe_followers IS
    'jobs enqueued with on_duplicate => ''replace'' behind a running holder of their key: pending when it finishes';

-- Who holds each dedupe key of a queue (ADR 0028, "Dedupe keys on the
-- rings"): its live job (held_until NULL: pending, waiting or running, as a
-- row of pgq.job_rows or on the queue's ring), or the job that finished
-- with a dedupe_for, until held_until (deleted by maintenance once past).
-- The one place a key is taken: an enqueue inserts its row (ON CONFLICT:
-- the key is taken), the job's end deletes it or keeps it for the period.
-- An enqueue that adds a follower (pgq.dedupe_followers) locks its
-- holder's row here (FOR SHARE) until it commits: the holder's end, which
-- deletes or updates it, waits, then moves the follower in.
CREATE TABLE pgq.dedupe_holds (
    queue_id   integer     NOT NULL REFERENCES pgq.queues ON DELETE CASCADE,
    dedupe_key text        NOT NULL,
    job_id     bigint      NOT NULL,
    held_until timestamptz,
    PRIMARY KEY (queue_id, dedupe_key)
);
COMMENT ON TABLE pgq.dedupe_holds IS
    'who holds each dedupe key: its live job (held_until NULL), or the job that finished with a dedupe_for, until held_until';


-- History and dead-letter: rings of segments ==================================

-- Completed jobs and dead jobs live in tables partitioned by segment,
-- each retention class's share of them a ring of the one ring layer
-- (src/pg/segments.h, ADR 0026), its ledger in pgq.rings / pgq.ring_segments
-- (below) like every stream's: ring id -1 - class for pgq.job_history,
-- -21 - class for pgq.dead_jobs (streams' ids are positive). A queue's rows
-- go to the ring of its own keep_completed / keep_dead (ADR 0021), so no
-- queue's retention changes what happens to another queue's rows; a sealed
-- segment is truncated once every row in it is past its queue's keep, so
-- history leaves in bulk, never by row deletes and their vacuum, and no row
-- is copied. Class 0 (keeps under 2 minutes) has segments 0-3; class k
-- (1-10, keeps from 2 * 4^(k-1) minutes; class 10 from 364 days on) the
-- three from 4 + 3(k-1). Dead jobs kept for good (keep_dead NULL, or their
-- queue dropped) go to pgq.dead_jobs_kept (segment 34), which is no ring.
-- The classes are listed in src/store/retention.cpp. The maintenance pass
-- adopts each ring on its first run (its ledger rows); until then writers
-- put rows in each ring's first segment, where the adopted ring starts.

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
    segment      smallint    NOT NULL,
    trace_context text                    -- the job's trace (ADR 0030)
) PARTITION BY LIST (segment);
COMMENT ON TABLE pgq.job_history IS
    'completed jobs kept for their queue''s keep_completed, with their result; a ring of segments per retention class (pgq.rings)';

-- Dead-letter: the job kept whole, with why it died.
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
    trace_context text,                   -- the job's trace, kept for retry_dead (ADR 0030)
    trace_links  text[],
    CONSTRAINT dead_jobs_reason_check
        CHECK (reason OPERATOR(pg_catalog.=) ANY ('{exhausted,cancelled,expired,dependency_failed}'::pg_catalog.text[]))
) PARTITION BY LIST (segment);
COMMENT ON TABLE pgq.dead_jobs IS
    'dead-letter: jobs whole, with their last error and the reason (exhausted, cancelled, expired); a ring of segments per retention class (pgq.rings), and pgq.dead_jobs_kept';

-- The segments of class 0, then the indexes (which every segment made
-- after them gets too), then the classes' segments.
DO $class_0$
DECLARE
    s integer;
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['job_history', 'dead_jobs'] LOOP
        FOR s IN 0 .. 3 LOOP
            EXECUTE pg_catalog.format('CREATE TABLE pgq.%I PARTITION OF pgq.%I FOR VALUES IN (%s)',
                                      t OPERATOR(pg_catalog.||) '_' OPERATOR(pg_catalog.||) s, t, s);
            PERFORM pg_catalog.pg_extension_config_dump(
                pg_catalog.format('pgq.%I', t OPERATOR(pg_catalog.||) '_' OPERATOR(pg_catalog.||) s)::pg_catalog.regclass, '');
            EXECUTE pg_catalog.format(
                'COMMENT ON TABLE pgq.%I IS %L',
                t OPERATOR(pg_catalog.||) '_' OPERATOR(pg_catalog.||) s,
                pg_catalog.format('a segment of pgq.%s (pgq.rings says which takes new rows)', t));
        END LOOP;
    END LOOP;
END
$class_0$;
CREATE INDEX job_history_id_idx ON pgq.job_history (id);
CREATE INDEX job_history_queue_idx ON pgq.job_history (queue_id, id);
CREATE INDEX dead_jobs_id_idx ON pgq.dead_jobs (id);
CREATE INDEX dead_jobs_queue_idx ON pgq.dead_jobs (queue, id);

DO $ring$
DECLARE
    k integer;
    s integer;
    t text;
    lo integer;
BEGIN
    FOR k IN 1..10 LOOP
        lo := 4 OPERATOR(pg_catalog.+) (3 OPERATOR(pg_catalog.*) (k OPERATOR(pg_catalog.-) 1));
        FOREACH t IN ARRAY ARRAY['job_history', 'dead_jobs'] LOOP
            FOR s IN lo .. lo OPERATOR(pg_catalog.+) 2 LOOP
                EXECUTE pg_catalog.format('CREATE TABLE pgq.%I PARTITION OF pgq.%I FOR VALUES IN (%s)',
                                          t OPERATOR(pg_catalog.||) '_' OPERATOR(pg_catalog.||) s, t, s);
                PERFORM pg_catalog.pg_extension_config_dump(
                    pg_catalog.format('pgq.%I', t OPERATOR(pg_catalog.||) '_' OPERATOR(pg_catalog.||) s)::pg_catalog.regclass, '');
                EXECUTE pg_catalog.format(
                    'COMMENT ON TABLE pgq.%I IS %L',
                    t OPERATOR(pg_catalog.||) '_' OPERATOR(pg_catalog.||) s,
                    pg_catalog.format('a segment of pgq.%s (pgq.rings says which takes new rows)', t));
            END LOOP;
        END LOOP;
    END LOOP;
END
$ring$;
CREATE TABLE pgq.dead_jobs_kept PARTITION OF pgq.dead_jobs FOR VALUES IN (34);
SELECT pg_catalog.pg_extension_config_dump('pgq.dead_jobs_kept', '');
COMMENT ON TABLE pgq.dead_jobs_kept IS
    'the dead jobs of queues that keep them for good (keep_dead NULL): never turned';


-- Per-queue rights (SPEC §7, docs/security.md, ADR 0010) =====================
--
-- produce, consume and admin, granted per queue (queue_id NULL: every queue,
-- present and future) with pgq.grant / pgq.revoke and checked inside the
-- functions, whose statements then run as the owner of these tables. A
-- queue's owner holds every right on it without a row here.

CREATE TABLE pgq.grants (
    role      pg_catalog.regrole NOT NULL,  -- dumped and restored by name
    queue_id  integer REFERENCES pgq.queues ON DELETE CASCADE,  -- NULL: every queue
    privilege text    NOT NULL CHECK (privilege OPERATOR(pg_catalog.=) ANY (ARRAY['produce', 'consume', 'admin'])),
    CONSTRAINT grants_unique UNIQUE NULLS NOT DISTINCT (role, queue_id, privilege)
);
COMMENT ON TABLE pgq.grants IS 'who holds which right on which queue (queue_id NULL: every queue); written by pgq.grant and pgq.revoke';


-- Coordination (SPEC §4): teams taking turns, assignments, switches, ladders
-- and once keys. See docs/coordination.md. ================================

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
COMMENT ON TABLE pgq.teams IS 'teams of the coordination primitives and whose turn was last';

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
COMMENT ON TABLE pgq.team_members IS 'members of teams, ordered by id for turns';

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
COMMENT ON TABLE pgq.assignments IS 'the owner of each subject (pgq.assign)';

CREATE TABLE pgq.switches (
    name       text        NOT NULL PRIMARY KEY,
    value      boolean     NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
COMMENT ON TABLE pgq.switches IS 'named switches (pgq.set_switch)';

CREATE TABLE pgq.ladders (
    subject    text        NOT NULL PRIMARY KEY,
    step       integer     NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
COMMENT ON TABLE pgq.ladders IS 'ladders that only climb (pgq.advance)';

-- Kept until you delete them (for example, keys older than your handlers'
-- longest retry window).
CREATE TABLE pgq.once_keys (
    key        text        NOT NULL PRIMARY KEY,
    first_at   timestamptz NOT NULL DEFAULT pg_catalog.now()
);
COMMENT ON TABLE pgq.once_keys IS 'keys taken by pgq.once';


-- Recurring jobs and the outbox (SPEC section 5). See
-- docs/schedules-and-outbox.md. ===========================================

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
COMMENT ON TABLE pgq.recurring IS 'schedules: spec, time zone, payload and the next slot; written by schedule and unschedule';

-- One row per firing, kept for the queue's retention.
CREATE TABLE pgq.schedule_runs (
    name     text        NOT NULL REFERENCES pgq.recurring ON DELETE CASCADE,
    slot     timestamptz NOT NULL,   -- the slot that was due
    fired_at timestamptz NOT NULL,
    job_id   bigint      NOT NULL
);
CREATE INDEX schedule_runs_name_idx ON pgq.schedule_runs (name, fired_at);
COMMENT ON TABLE pgq.schedule_runs IS 'each firing of a schedule (slot, time, job), kept for the queue''s retention';

-- Topics have owners and rights (issue 15, M4; docs/security.md). A topic is
-- created by a role with the admin right on every queue, which owns it.
-- Publishing takes the publish right on the topic, and then enqueues into
-- every subscribed queue whatever the publisher's rights on them: a
-- subscription is the subscribing queue's admin's decision, and never makes
-- someone else's publish fail. Subscribing takes the admin right on the
-- queue and the subscribe right on the topic: a topic's events reach only
-- queues its owner allowed.
CREATE TABLE pgq.topics (
    name       text               PRIMARY KEY,
    owner      pg_catalog.regrole NOT NULL,  -- dumped and restored by name
    created_at timestamptz        NOT NULL DEFAULT pg_catalog.now()
);
COMMENT ON TABLE pgq.topics IS 'topics of the outbox and who owns each; written by pgq.create_topic and pgq.drop_topic';

CREATE TABLE pgq.topic_grants (
    role      pg_catalog.regrole NOT NULL,
    topic     text NOT NULL REFERENCES pgq.topics ON DELETE CASCADE ON UPDATE CASCADE,
    privilege text NOT NULL CHECK (privilege OPERATOR(pg_catalog.=) ANY (ARRAY['publish', 'subscribe'])),
    PRIMARY KEY (role, topic, privilege)
);
COMMENT ON TABLE pgq.topic_grants IS 'who may publish to or subscribe a queue to which topic; written by pgq.grant_topic and pgq.revoke_topic';

CREATE TABLE pgq.subscriptions (
    topic      text        NOT NULL,
    queue_id   integer     NOT NULL REFERENCES pgq.queues ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (topic, queue_id),
    FOREIGN KEY (topic) REFERENCES pgq.topics ON DELETE CASCADE ON UPDATE CASCADE
);
COMMENT ON TABLE pgq.subscriptions IS 'which queues receive which topic''s events; written by subscribe and unsubscribe';

-- Published events: the record that the business change committed. The
-- jobs carry the payload to each subscriber; events are kept for the
-- longest retention of any queue.
CREATE SEQUENCE pgq.event_id_seq AS bigint;

CREATE TABLE pgq.events (
    id           bigint      NOT NULL DEFAULT pg_catalog.nextval('pgq.event_id_seq') PRIMARY KEY,
    topic        text        NOT NULL,
    payload      jsonb       NOT NULL,
    dedupe_key   text,
    published_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    trace_context text                  -- the publisher's trace (ADR 0030)
);
ALTER SEQUENCE pgq.event_id_seq OWNED BY pgq.events.id;
CREATE UNIQUE INDEX events_dedupe_idx ON pgq.events (topic, dedupe_key)
    WHERE dedupe_key IS NOT NULL;
CREATE INDEX events_published_idx ON pgq.events USING brin (published_at);
COMMENT ON TABLE pgq.events IS 'published events, the audit record of the outbox (the jobs carry the payload)';


-- Streams (SPEC §10; docs/streams.md, ADR 0020) ==============================
--
-- Events appended to a ring of segment tables per stream, read by
-- registered consumers in batches cut by transaction snapshots, reclaimed
-- by TRUNCATE.

CREATE SEQUENCE pgq.stream_id_seq AS integer;

CREATE TABLE pgq.streams (
    stream_id  integer            PRIMARY KEY,
    name       text               NOT NULL UNIQUE,
    owner      pg_catalog.regrole NOT NULL,  -- dumped and restored by name
    rotation   interval           NOT NULL,
    created_at timestamptz        NOT NULL DEFAULT pg_catalog.now()
);
COMMENT ON TABLE pgq.streams IS
    'streams and their owners; written by create_stream, alter_stream and drop_stream';

CREATE TABLE pgq.stream_grants (
    role      pg_catalog.regrole NOT NULL,
    stream_id integer            NOT NULL,  -- 0: every stream, present and future
    privilege text               NOT NULL
              CHECK (privilege OPERATOR(pg_catalog.=) ANY ('{produce,consume,admin}'::pg_catalog.text[])),
    PRIMARY KEY (role, stream_id, privilege)
);
COMMENT ON TABLE pgq.stream_grants IS
    'who may append to, read or administer which stream (0: every stream); written by grant_stream and revoke_stream';

-- The ledger of the segment rings (src/pg/segments.h): per ring, which
-- segment takes new rows; per segment, whether it is empty (truncated and
-- not made current since). A stream's ring has the stream's id; the
-- history and dead-letter rings negative ids (above).
CREATE TABLE pgq.rings (
    ring_id    integer     PRIMARY KEY,
    segments   smallint    NOT NULL CHECK (segments OPERATOR(pg_catalog.>=) 2),
    current    smallint    NOT NULL,
    generation bigint      NOT NULL DEFAULT 0,   -- rotations so far
    rotated_at timestamptz NOT NULL
);
COMMENT ON TABLE pgq.rings IS
    'rings of segment tables (streams; history and dead-letter per retention class, negative ids): which segment takes new rows; turned by maintenance';

CREATE TABLE pgq.ring_segments (
    ring_id      integer     NOT NULL REFERENCES pgq.rings ON DELETE CASCADE,
    segment      smallint    NOT NULL,
    empty        boolean     NOT NULL,   -- truncated, not current since
    opened_at    timestamptz,            -- made current
    sealed_at    timestamptz,            -- stopped being current
    truncated_at timestamptz,
    PRIMARY KEY (ring_id, segment)
);
COMMENT ON TABLE pgq.ring_segments IS
    'the segments of each ring and whether each is empty; a sealed segment is truncated once its owner says no reader needs its rows';

-- The events. One partition per stream (a table partitioned in turn by
-- segment, the stream's ring), created by create_stream: those tables are
-- not members of the extension, so pg_dump dumps them and their rows, and
-- DROP EXTENSION drops them with this parent.
CREATE TABLE pgq.stream_events (
    stream_id   integer     NOT NULL,
    segment     smallint    NOT NULL,
    txid        xid8        NOT NULL,   -- the appending transaction (pg_current_xact_id)
    id          bigint      NOT NULL,
    appended_at timestamptz NOT NULL,
    payload     jsonb       NOT NULL,
    trace_context text                  -- the appender's or publisher's trace (ADR 0030)
) PARTITION BY LIST (stream_id);
-- A batch is read in (txid, id) order from a consumer's cursor: each
-- stream's table has that index (created with it; not here, on the root, as
-- pg_restore would then find the partitions' indexes made by ATTACH before
-- it creates them itself).
COMMENT ON TABLE pgq.stream_events IS
    'events of every stream: a partition per stream (pgq.stream_events_<id>), each a ring of segments (_<id>_<segment>) dropped by TRUNCATE';

CREATE SEQUENCE pgq.stream_event_id_seq AS bigint;

CREATE SEQUENCE pgq.stream_consumer_id_seq AS integer;

-- A consumer's position: every event whose transaction is visible in
-- done_snapshot is finished; of the window (done_snapshot, window_end] the
-- events up to (cursor_txid, cursor_id) in (txid, id) order are too. The
-- open batch is the window's events after the cursor up to (batch_end_txid,
-- batch_end_id). A batch id is consumer_id * 2^32 + batch_no.
CREATE TABLE pgq.stream_consumers (
    consumer_id       integer            PRIMARY KEY,
    stream_id         integer            NOT NULL REFERENCES pgq.streams ON DELETE CASCADE,
    name              text               NOT NULL,
    registered_at     timestamptz        NOT NULL DEFAULT pg_catalog.now(),
    done_snapshot     pg_catalog.pg_snapshot NOT NULL,
    done_at           timestamptz        NOT NULL,
    window_end        pg_catalog.pg_snapshot,
    window_end_at     timestamptz,
    cursor_txid       xid8               NOT NULL DEFAULT '0',
    cursor_id         bigint             NOT NULL DEFAULT 0,
    batch_no          bigint             NOT NULL DEFAULT 0,
    batch_open        boolean            NOT NULL DEFAULT false,
    batch_end_txid    xid8,
    batch_end_id      bigint,
    batch_events      integer,
    batch_ends_window boolean,
    batch_opened_at   timestamptz,
    finished_batches  bigint             NOT NULL DEFAULT 0,
    finished_events   bigint             NOT NULL DEFAULT 0,
    last_finished_at  timestamptz,
    UNIQUE (stream_id, name)
) WITH (fillfactor = 50);
COMMENT ON TABLE pgq.stream_consumers IS
    'consumers of streams and their positions (snapshots, a cursor, the open batch); written by register_consumer, next_batch and finish_batch';

-- The outbox feeds streams too (SPEC §10): pgq.subscribe(topic, stream =>
-- ...) makes publish append the event, in the envelope queue jobs get
-- ({event_id, topic, payload[, group_key]}), to the stream in the
-- publishing transaction. Subscribing takes the admin right on the stream
-- and the subscribe right on the topic, as for a queue (ADR 0013).
CREATE TABLE pgq.stream_subscriptions (
    topic      text        NOT NULL REFERENCES pgq.topics ON DELETE CASCADE ON UPDATE CASCADE,
    stream_id  integer     NOT NULL REFERENCES pgq.streams ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (topic, stream_id)
);
COMMENT ON TABLE pgq.stream_subscriptions IS
    'which streams receive which topic''s events; written by subscribe and unsubscribe';


-- What pg_dump keeps ========================================================

-- Queue state is user data: pg_dump must keep it (the segments of the rings
-- are registered where they are made, above).
SELECT pg_catalog.pg_extension_config_dump('pgq.queues', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.queue_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.job_rows', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.job_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.finished', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.rate_buckets', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.job_dependencies', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.dependency_failures', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.dependency_releases', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.dedupe_followers', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.dedupe_holds', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.grants', '');
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
SELECT pg_catalog.pg_extension_config_dump('pgq.topics', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.topic_grants', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.subscriptions', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.events', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.event_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.stream_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.streams', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.stream_grants', '');
-- The history and dead-letter rings' ledger rows are not dumped: a
-- restored ring is adopted again (its restored rows kept until past their
-- keep). Streams' rings (positive ids) are.
SELECT pg_catalog.pg_extension_config_dump('pgq.rings', 'WHERE ring_id OPERATOR(pg_catalog.>) 0');
SELECT pg_catalog.pg_extension_config_dump('pgq.ring_segments', 'WHERE ring_id OPERATOR(pg_catalog.>) 0');
SELECT pg_catalog.pg_extension_config_dump('pgq.stream_event_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.stream_consumer_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.stream_consumers', '');
SELECT pg_catalog.pg_extension_config_dump('pgq.stream_subscriptions', '');


-- Types =====================================================================

-- What claim returns.
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

-- What pgq.job, pgq.list_jobs and pgq.find_jobs return. pgq.job_info is
-- only returned as rows, never tested as a whole row, and every client
-- names its columns.
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
    payload      jsonb,
    dead_reason  text,         -- why a dead or cancelled job is dead (pgq.dead_jobs.reason); else NULL
    trace_id     text,         -- the W3C trace id of its trace context (ADR 0030); else NULL
    trace_context text         -- traceparent[;tracestate] (admin: NULL, as the payload)
);

-- What claim_traced returns (ADR 0030): claimed_job's columns, then the
-- job's W3C trace context and the traceparents of its parents (enqueue's
-- after). A separate type so that pgq.claim(...) IS NOT NULL stays true of
-- every claimed job (a row is NOT NULL only when every field is).
CREATE TYPE pgq.traced_job AS (
    id           bigint,
    queue        text,
    payload      jsonb,
    attempt      integer,
    max_attempts integer,
    lease_until  timestamptz,
    enqueued_at  timestamptz,
    priority     integer,
    traceparent  text,
    tracestate   text,
    links        text[]
);




-- Functions =================================================================

-- Clock and internal readers --------------------------------------------------

CREATE FUNCTION pgq.clock() RETURNS timestamptz
    AS 'MODULE_PATHNAME', 'pgq_clock' LANGUAGE C VOLATILE PARALLEL SAFE;
COMMENT ON FUNCTION pgq.clock() IS
    'the time pgq uses for leases and readiness: the wall clock, shifted by pgq.debug_clock_offset';

CREATE FUNCTION pgq.unflushed_completions(queue_id integer) RETURNS bigint
    AS 'MODULE_PATHNAME', 'pgq_unflushed_completions' LANGUAGE C VOLATILE PARALLEL SAFE;
COMMENT ON FUNCTION pgq.unflushed_completions(integer) IS
    'completions of the queue counted in shared memory and not yet written to pgq.finished (internal, for queue_stats)';

CREATE FUNCTION pgq.worker_slots(OUT pid integer, OUT kind text, OUT database oid,
                                 OUT last_pass timestamptz)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'pgq_worker_slots' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.worker_slots() IS
    'the pgq background workers running, from shared memory (none without preload); see pgq.workers';

-- Queues (SPEC §2, §8) --------------------------------------------------------

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
    group_concurrency integer  DEFAULT 1,
    fairness       text        DEFAULT NULL,
    rate_limit_per_key real    DEFAULT NULL,
    max_pending    integer     DEFAULT NULL)
RETURNS void AS 'MODULE_PATHNAME', 'pgq_create_queue' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.create_queue(text, integer, interval, interval, interval, interval, boolean, real, regprocedure, boolean, interval, interval, integer, integer, text, real, integer) IS
    'creates a queue owned by the calling role (the admin right on every queue): its default max_attempts, lease, backoff, retention, NOTIFY, rate limits, in-database handler, how long completed and dead jobs are kept, its concurrency caps, its fairness across group keys and its max_pending';

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
    group_concurrency integer  DEFAULT NULL,
    fairness       text        DEFAULT NULL,
    rate_limit_per_key real    DEFAULT NULL,
    max_pending    integer     DEFAULT NULL)
RETURNS void AS 'MODULE_PATHNAME', 'pgq_alter_queue' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.alter_queue(text, integer, interval, interval, interval, interval, boolean, real, regprocedure, interval, interval, integer, integer, text, real, integer) IS
    'changes the settings given (NULL: unchanged; rate_limit => 0, rate_limit_per_key => 0, max_running => 0 and max_pending => 0 remove the limit, fairness => ''none'' the fairness); the handler only by the queue''s owner; admin right';

CREATE FUNCTION pgq.drop_queue(queue text, force boolean DEFAULT false)
RETURNS void AS 'MODULE_PATHNAME', 'pgq_drop_queue' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.drop_queue(text, boolean) IS
    'drops a queue; refuses while it holds pending, running or dead jobs unless force; admin right';

CREATE FUNCTION pgq.pause(queue text)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_pause' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.pause(text) IS
    'stops claims from the queue (enqueues still accepted); returns the stored paused flag; admin right';

CREATE FUNCTION pgq.resume(queue text)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_resume' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.resume(text) IS
    'lets claims take jobs from the queue again; returns the stored paused flag; admin right';

-- A queue's settings, for any role holding a right on it (before: a column
-- grant on pgq.queues).
CREATE FUNCTION pgq.queue_settings(
    queue text DEFAULT NULL,
    OUT queue_name text, OUT max_attempts integer, OUT lease interval,
    OUT backoff_base interval, OUT backoff_max interval, OUT retention interval,
    OUT keep_completed interval, OUT keep_dead interval, OUT notify boolean,
    OUT rate_limit real, OUT max_running integer, OUT group_concurrency integer,
    OUT handler text, OUT owner name, OUT paused boolean, OUT created_at timestamptz,
    OUT fairness text, OUT rate_limit_per_key real, OUT max_pending integer)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'pgq_queue_settings' LANGUAGE C STABLE ROWS 10;
COMMENT ON FUNCTION pgq.queue_settings(text) IS
    'the settings of a queue (NULL: of every queue the caller holds a right on); any right';

-- Jobs (SPEC §3, §8) ----------------------------------------------------------

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
    after        bigint[]    DEFAULT NULL,
    traceparent  text        DEFAULT NULL,
    tracestate   text        DEFAULT NULL)
RETURNS bigint AS 'MODULE_PATHNAME', 'pgq_enqueue' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.enqueue(text, jsonb, timestamp with time zone, integer, text, integer, text, interval, text, bigint[], text, text) IS
    'adds a job in the caller''s transaction and returns its id; a dedupe_key held by a live job (or finished within its dedupe_for) returns the holder''s id, or with on_duplicate => ''replace'' updates a holder that has not started; with after, the job waits until those jobs are done (dead-lettered with dependency_failed if one dies); traceparent/tracestate (else the setting pgq.trace_context): its W3C trace context; produce right (and a right on each parent''s queue)';

CREATE FUNCTION pgq.enqueue_many(
    queue       text,
    payloads    jsonb[],
    run_at      timestamptz DEFAULT pg_catalog.now(),
    priority    integer     DEFAULT 0,
    after       bigint[]    DEFAULT NULL,
    group_keys  text[]      DEFAULT NULL,
    dedupe_keys text[]      DEFAULT NULL,
    traceparent text        DEFAULT NULL,
    tracestate  text        DEFAULT NULL)
RETURNS SETOF bigint AS 'MODULE_PATHNAME', 'pgq_enqueue_many' LANGUAGE C VOLATILE ROWS 100;
COMMENT ON FUNCTION pgq.enqueue_many(text, jsonb[], timestamp with time zone, integer, bigint[], text[], text[], text, text) IS
    'adds one job per payload in one statement and returns their ids in input order; with after, each waits for those jobs (a fan-out behind one parent, or many children behind the same parents); group_keys and dedupe_keys: one key for every payload or one per payload (NULL: none), a taken dedupe key answered with its holder''s id as enqueue does; traceparent/tracestate (else the setting pgq.trace_context): every job''s W3C trace context; produce right';

CREATE FUNCTION pgq.claim(
    queue text,
    n     integer  DEFAULT 1,
    lease interval DEFAULT NULL,
    wait  interval DEFAULT '0')
RETURNS SETOF pgq.claimed_job AS 'MODULE_PATHNAME', 'pgq_claim' LANGUAGE C VOLATILE ROWS 10;
COMMENT ON FUNCTION pgq.claim(text, integer, interval, interval) IS
    'leases up to n ready jobs (priority, then run_at, then id) in the same statement that selects them; with wait, blocks until one is enqueued or the wait ends; consume right';

CREATE FUNCTION pgq.claim(
    queues text[],
    n      integer  DEFAULT 1,
    lease  interval DEFAULT NULL,
    wait   interval DEFAULT '0')
RETURNS SETOF pgq.claimed_job AS 'MODULE_PATHNAME', 'pgq_claim_queues' LANGUAGE C VOLATILE ROWS 10;
COMMENT ON FUNCTION pgq.claim(text[], integer, interval, interval) IS
    'leases up to n ready jobs from any of the queues, in claim order across them, each queue''s lease, rate limit and caps applying; with wait, blocks until one of them has a job or the wait ends; consume right on each';

-- claim with each job's trace context (ADR 0030); claim's rights, wait and
-- order. Its row IS NOT NULL is false for an untraced job: test .id.
CREATE FUNCTION pgq.claim_traced(
    queue text,
    n     integer  DEFAULT 1,
    lease interval DEFAULT NULL,
    wait  interval DEFAULT '0')
RETURNS SETOF pgq.traced_job AS 'MODULE_PATHNAME', 'pgq_claim_traced' LANGUAGE C VOLATILE ROWS 10;
COMMENT ON FUNCTION pgq.claim_traced(text, integer, interval, interval) IS
    'claim(queue, n, lease, wait) with each job''s W3C trace context (traceparent, tracestate) and its parents'' traceparents (links); consume right';

CREATE FUNCTION pgq.claim_traced(
    queues text[],
    n      integer  DEFAULT 1,
    lease  interval DEFAULT NULL,
    wait   interval DEFAULT '0')
RETURNS SETOF pgq.traced_job AS 'MODULE_PATHNAME', 'pgq_claim_queues_traced' LANGUAGE C VOLATILE ROWS 10;
COMMENT ON FUNCTION pgq.claim_traced(text[], integer, interval, interval) IS
    'claim(queues, n, lease, wait) with each job''s W3C trace context and links; consume right on each';

CREATE FUNCTION pgq.complete(id bigint, attempt integer, result jsonb DEFAULT NULL)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_complete' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.complete(bigint, integer, jsonb) IS
    'finishes a claimed job, keeping result with its history when the queue keeps completed jobs; false when the claim no longer holds it (fenced by attempt); consume right';

CREATE FUNCTION pgq.complete_many(ids bigint[], attempts integer[])
RETURNS integer AS 'MODULE_PATHNAME', 'pgq_complete_many' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.complete_many(bigint[], integer[]) IS
    'finishes several claimed jobs in one statement; how many were still held; consume right';

CREATE FUNCTION pgq.fail(id bigint, attempt integer, error text DEFAULT NULL, retry_in interval DEFAULT NULL)
RETURNS text AS 'MODULE_PATHNAME', 'pgq_fail' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.fail(bigint, integer, text, interval) IS
    'records a failed attempt: ''retry'' after the backoff (or retry_in), ''dead'' when attempts are exhausted, ''lost'' when fenced; consume right';

CREATE FUNCTION pgq.extend(id bigint, attempt integer, lease interval)
RETURNS timestamptz AS 'MODULE_PATHNAME', 'pgq_extend' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.extend(bigint, integer, interval) IS
    'extends a claim''s lease (heartbeat); the new lease_until, or NULL when the claim no longer holds; consume right';

CREATE FUNCTION pgq.release(id bigint, attempt integer)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_release' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.release(bigint, integer) IS
    'gives a claimed job back now without counting the attempt (graceful shutdown); consume right';

CREATE FUNCTION pgq.snooze(id bigint, attempt integer, delay interval)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_snooze' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.snooze(bigint, integer, interval) IS
    'gives a claimed job back, due after delay, without spending the attempt ("not now", not a failure); false when fenced; consume right';

CREATE FUNCTION pgq.progress(id bigint, attempt integer, progress jsonb)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_progress' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.progress(bigint, integer, jsonb) IS
    'records a running job''s progress (overwriting the last); false when fenced; consume right';

CREATE FUNCTION pgq.cancel(id bigint)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_cancel' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.cancel(bigint) IS
    'moves a pending, waiting or running job to dead-letter with reason cancelled (a running one''s claim is fenced at once); produce or admin right';

-- cancel and retry_dead that say why nothing happened (the boolean ones
-- keep their contract). Rights as theirs; a job of a queue the caller has
-- no right on answers not_found, as an unknown id.
CREATE FUNCTION pgq.cancel_job(id bigint)
RETURNS text AS 'MODULE_PATHNAME', 'pgq_cancel_job' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.cancel_job(bigint) IS
    'cancel(id) with its outcome: cancelled, not_found, already_completed, already_dead or already_cancelled; produce or admin right';

CREATE FUNCTION pgq.retry_dead(id bigint)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_retry_dead' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.retry_dead(bigint) IS
    'requeues one dead-letter job with fresh attempts; admin right';

CREATE FUNCTION pgq.retry_dead(queue text, max integer DEFAULT 1000)
RETURNS integer AS 'MODULE_PATHNAME', 'pgq_retry_dead_queue' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.retry_dead(text, integer) IS
    'requeues up to max dead-letter jobs of the queue, oldest first; how many; admin right';

CREATE FUNCTION pgq.retry_dead_job(id bigint)
RETURNS text AS 'MODULE_PATHNAME', 'pgq_retry_dead_job' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.retry_dead_job(bigint) IS
    'retry_dead(id) with its outcome: retried, not_found, not_dead, already_completed or dedupe_key_taken; admin right';

CREATE FUNCTION pgq.maintain(
    OUT expired_requeued bigint,
    OUT expired_dead     bigint,
    OUT finished_dropped bigint,
    OUT schedules_fired  bigint)
RETURNS record AS 'MODULE_PATHNAME', 'pgq_maintain' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.maintain() IS
    'one maintenance pass in the calling database (expire leases, dead-letter, drop finished rows, fire schedules): what the background worker runs; admin right on every queue';

-- Rewrites pgq.job_rows with only its live jobs (ADR 0008); the maintenance pass
-- does it by itself past pgq.compact_min_size. NULL: the table stayed busy.
CREATE FUNCTION pgq.compact_jobs()
RETURNS bigint AS 'MODULE_PATHNAME', 'pgq_compact_jobs' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.compact_jobs() IS
    'rewrites pgq.job_rows now if it is worth it (ADR 0008); owner of pgq.job_rows or superuser';

-- Dead-letter and history (SPEC §8; docs/lifecycle.md) ------------------------

CREATE FUNCTION pgq.purge_dead(queue text, older_than interval DEFAULT '0')
RETURNS bigint AS 'MODULE_PATHNAME', 'pgq_purge_dead' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.purge_dead(text, interval) IS
    'deletes the queue''s dead jobs that died more than older_than ago; how many; admin right';

-- One dead job deleted, with its outcome (the dashboard's bulk purge of the
-- selected jobs; purge_dead deletes by age). Admin right, as purge_dead; a
-- job of a queue the caller does not administer answers not_found, as an
-- unknown id.
CREATE FUNCTION pgq.purge_dead_job(id bigint)
RETURNS text AS 'MODULE_PATHNAME', 'pgq_purge_dead_job' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.purge_dead_job(bigint) IS
    'deletes one dead (or cancelled) job: purged, not_found or not_dead; admin right';

CREATE FUNCTION pgq.job(id bigint)
RETURNS SETOF pgq.job_info AS 'MODULE_PATHNAME', 'pgq_job' LANGUAGE C STABLE ROWS 1;
COMMENT ON FUNCTION pgq.job(bigint) IS
    'the job''s state and history, no row when unknown; produce or consume right on its queue (admin: without payload, progress and result)';

CREATE FUNCTION pgq.list_jobs(queue text, state text DEFAULT NULL, max integer DEFAULT 100,
                              before_id bigint DEFAULT NULL, reason text DEFAULT NULL)
RETURNS SETOF pgq.job_info AS 'MODULE_PATHNAME', 'pgq_list_jobs' LANGUAGE C STABLE ROWS 100;
COMMENT ON FUNCTION pgq.list_jobs(text, text, integer, bigint, text) IS
    'a queue''s jobs, newest first, max per page (next page: before_id => the last id), in state and dead for reason if given; rights as pgq.job';

-- The live jobs whose dedupe or group key is key, across the queues the
-- caller holds a right on, newest first (through jobs_dedupe_idx and
-- jobs_group_idx); redaction as list_jobs.
CREATE FUNCTION pgq.find_jobs(key text, max integer DEFAULT 100)
RETURNS SETOF pgq.job_info AS 'MODULE_PATHNAME', 'pgq_find_jobs' LANGUAGE C STABLE ROWS 10;
COMMENT ON FUNCTION pgq.find_jobs(text, integer) IS
    'pending, running and waiting jobs whose dedupe_key or group_key is key, newest first, of the queues the caller holds a right on; rights as pgq.list_jobs';

CREATE FUNCTION pgq.job_dependencies(
    id bigint, max integer DEFAULT 100,
    OUT direction text, OUT job_id bigint, OUT queue text, OUT state text)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'pgq_job_dependencies' LANGUAGE C STABLE ROWS 10;
COMMENT ON FUNCTION pgq.job_dependencies(bigint, integer) IS
    'a job''s parents (direction parent), children (child) and the dependents it took with it when it died (taken), at most max of each; rights as pgq.job';

-- Per-queue rights (SPEC §7, docs/security.md, ADR 0010) ----------------------

CREATE FUNCTION pgq.grant(role name, queue text, privilege text)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_grant' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.grant(name, text, text) IS
    'gives role the privilege (produce, consume or admin) on queue (NULL: every queue, present and future); true if it did not hold it yet';

CREATE FUNCTION pgq.revoke(role name, queue text, privilege text)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_revoke' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.revoke(name, text, text) IS
    'takes back a grant made with pgq.grant (the same queue, or NULL); true if there was one';

CREATE FUNCTION pgq.has_queue_privilege(queue text, privilege text)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_has_queue_privilege' LANGUAGE C STABLE STRICT;
COMMENT ON FUNCTION pgq.has_queue_privilege(text, text) IS
    'whether the current role holds the privilege on queue; privilege may list several (''produce, consume''): any of them';

CREATE FUNCTION pgq.has_queue_privilege(role name, queue text, privilege text)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_has_role_queue_privilege' LANGUAGE C STABLE STRICT;
COMMENT ON FUNCTION pgq.has_queue_privilege(name, text, text) IS
    'whether role holds the privilege on queue; privilege may list several: any of them';

-- Coordination (SPEC §4, docs/coordination.md) --------------------------------

CREATE FUNCTION pgq.add_member(team text, member text)
RETURNS bigint AS 'MODULE_PATHNAME', 'pgq_add_member' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.add_member(text, text) IS
    'adds a member to a team (creating the team); the member''s stable id, which orders the turns';

CREATE FUNCTION pgq.set_member_active(team text, member text, active boolean)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_set_member_active' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.set_member_active(text, text, boolean) IS
    'sets whether a member takes turns (explicit value); returns the stored flag';

CREATE FUNCTION pgq.remove_member(team text, member text)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_remove_member' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.remove_member(text, text) IS
    'removes a member from a team; whether it was one';

CREATE FUNCTION pgq.next_turn(team text)
RETURNS text AS 'MODULE_PATHNAME', 'pgq_next_turn' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.next_turn(text) IS
    'the member whose turn it is, spending the turn; concurrent callers get consecutive turns';

CREATE FUNCTION pgq.assign(team text, subject text)
RETURNS text AS 'MODULE_PATHNAME', 'pgq_assign' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.assign(text, text) IS
    'the owner of a subject: the existing one without spending a turn, else the next turn''s member; exactly one owner under any race';

CREATE FUNCTION pgq.set_switch(name text, value boolean)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_set_switch' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.set_switch(text, boolean) IS
    'sets a named switch to an explicit value; returns the stored value';

CREATE FUNCTION pgq.switch(name text)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_switch' LANGUAGE C STABLE;
COMMENT ON FUNCTION pgq.switch(text) IS
    'the stored value of a named switch, NULL if never set';

CREATE FUNCTION pgq.advance(subject text, step integer)
RETURNS integer AS 'MODULE_PATHNAME', 'pgq_advance' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.advance(text, integer) IS
    'moves a ladder up to step, never down; returns the stored step';

CREATE FUNCTION pgq.once(key text)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_once' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.once(text) IS
    'true for the first transaction that commits with this key, false for every other: the idempotency primitive for handlers';

-- Coordination: readers for the roles that may use it, EXECUTE-granted as
-- its other functions (before: GRANT SELECT on its tables).
CREATE FUNCTION pgq.list_teams(
    team text DEFAULT NULL, max integer DEFAULT 100,
    OUT name text, OUT turn bigint, OUT created_at timestamptz,
    OUT active_members text[], OUT inactive_members text[], OUT last_member text,
    OUT assignments bigint)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'pgq_list_teams' LANGUAGE C STABLE ROWS 10;
COMMENT ON FUNCTION pgq.list_teams(text, integer) IS
    'teams with their active and inactive members in turn order, the last one served and how many subjects are assigned; EXECUTE as the coordination functions';

CREATE FUNCTION pgq.list_switches(
    switch text DEFAULT NULL, max integer DEFAULT 100,
    OUT name text, OUT value boolean, OUT updated_at timestamptz)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'pgq_list_switches' LANGUAGE C STABLE ROWS 10;
COMMENT ON FUNCTION pgq.list_switches(text, integer) IS
    'switches and their values; EXECUTE as the coordination functions';

CREATE FUNCTION pgq.list_ladders(
    ladder text DEFAULT NULL, max integer DEFAULT 100,
    OUT subject text, OUT step integer, OUT updated_at timestamptz)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'pgq_list_ladders' LANGUAGE C STABLE ROWS 100;
COMMENT ON FUNCTION pgq.list_ladders(text, integer) IS
    'ladders, most recently climbed first; EXECUTE as the coordination functions';

-- Recurring jobs (SPEC §5, docs/schedules-and-outbox.md) ----------------------

CREATE FUNCTION pgq.schedule(
    name     text,
    queue    text,
    spec     text,
    payload  jsonb DEFAULT '{}',
    timezone text  DEFAULT 'UTC')
RETURNS void AS 'MODULE_PATHNAME', 'pgq_schedule' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.schedule(text, text, text, jsonb, text) IS
    'creates or replaces a recurring job (cron in a time zone, @hourly.., or @every <interval>); admin and produce rights on its queue';

CREATE FUNCTION pgq.unschedule(name text)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_unschedule' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.unschedule(text) IS
    'removes a schedule; whether one of a queue the caller administers existed';

-- The runs of a queue's schedules, newest first, for its admin (before: a
-- grant on pgq.schedule_runs).
CREATE FUNCTION pgq.list_schedule_runs(
    queue text DEFAULT NULL, schedule text DEFAULT NULL, max integer DEFAULT 100,
    OUT schedule_name text, OUT queue_name text, OUT slot timestamptz,
    OUT fired_at timestamptz, OUT job_id bigint)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'pgq_list_schedule_runs' LANGUAGE C STABLE ROWS 100;
COMMENT ON FUNCTION pgq.list_schedule_runs(text, text, integer) IS
    'each firing of the schedules of a queue (NULL: of every queue the caller administers), newest first; admin right';

-- The outbox and its topics (SPEC §5, §9; ADR 0013) ---------------------------

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

CREATE FUNCTION pgq.subscribe(topic text, queue text DEFAULT NULL, stream text DEFAULT NULL)
RETURNS void AS 'MODULE_PATHNAME', 'pgq_subscribe' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.subscribe(text, text, text) IS
    'routes the topic''s events into a queue (a job each) or a stream (an event each); admin right on the queue or stream and the subscribe right on the topic';

CREATE FUNCTION pgq.unsubscribe(topic text, queue text DEFAULT NULL, stream text DEFAULT NULL)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_unsubscribe' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.unsubscribe(text, text, text) IS
    'stops routing a topic''s events into a queue or stream; whether it was subscribed; admin on the queue or stream, or owner of the topic';

CREATE FUNCTION pgq.publish(topic text, payload jsonb, dedupe_key text DEFAULT NULL,
                            group_key text DEFAULT NULL, traceparent text DEFAULT NULL,
                            tracestate text DEFAULT NULL)
RETURNS bigint AS 'MODULE_PATHNAME', 'pgq_publish' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.publish(text, jsonb, text, text, text, text) IS
    'records an event and enqueues one job per subscribed queue in the caller''s transaction; with group_key, each job joins that FIFO group of its queue (one per key in flight, in commit order); the event, its jobs and its stream events carry the W3C trace context given (else the setting pgq.trace_context); publish right on the topic';

-- Streams (SPEC §10, docs/streams.md, ADR 0020) -------------------------------

CREATE FUNCTION pgq.create_stream(stream text, rotation interval DEFAULT '2 hours',
                                  if_not_exists boolean DEFAULT false)
RETURNS void AS 'MODULE_PATHNAME', 'pgq_create_stream' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.create_stream(text, interval, boolean) IS
    'creates a stream (a ring of three segment tables, turned every rotation); admin right on every stream';

CREATE FUNCTION pgq.alter_stream(stream text, rotation interval)
RETURNS void AS 'MODULE_PATHNAME', 'pgq_alter_stream' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.alter_stream(text, interval) IS
    'changes how often a stream''s ring turns; admin right on the stream';

CREATE FUNCTION pgq.drop_stream(stream text, if_exists boolean DEFAULT false)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_drop_stream' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.drop_stream(text, boolean) IS
    'drops a stream with its events, consumers and grants; whether it existed; admin right on the stream';

CREATE FUNCTION pgq.append(stream text, payload jsonb, traceparent text DEFAULT NULL,
                           tracestate text DEFAULT NULL)
RETURNS bigint AS 'MODULE_PATHNAME', 'pgq_append' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.append(text, jsonb, text, text) IS
    'appends an event to a stream, visible to its consumers when the transaction commits; its id; traceparent/tracestate (else the setting pgq.trace_context): its W3C trace context; produce right';

CREATE FUNCTION pgq.append_many(stream text, payloads jsonb[], traceparent text DEFAULT NULL,
                                tracestate text DEFAULT NULL)
RETURNS SETOF bigint AS 'MODULE_PATHNAME', 'pgq_append_many' LANGUAGE C VOLATILE ROWS 100;
COMMENT ON FUNCTION pgq.append_many(text, jsonb[], text, text) IS
    'appends one event per payload, in order; their ids in input order; every event carries the W3C trace context given (else the setting pgq.trace_context); produce right';

CREATE FUNCTION pgq.register_consumer(stream text, consumer text)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_register_consumer' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.register_consumer(text, text) IS
    'registers a consumer, which then reads every event committed after this call commits; false if it was registered; consume right';

CREATE FUNCTION pgq.unregister_consumer(stream text, consumer text)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_unregister_consumer' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.unregister_consumer(text, text) IS
    'forgets a consumer and its position (it no longer holds the stream''s segments); whether it was registered; consume or admin right';

CREATE FUNCTION pgq.next_batch(stream text, consumer text, max_events integer DEFAULT 1000,
                               wait interval DEFAULT '0',
                               OUT batch_id bigint, OUT event_id bigint, OUT payload jsonb,
                               OUT appended_at timestamptz)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'pgq_next_batch' LANGUAGE C VOLATILE ROWS 1000;
COMMENT ON FUNCTION pgq.next_batch(text, text, integer, interval) IS
    'the consumer''s next batch (its open one again until finished): up to max_events events in commit order, waiting up to wait for some; consume right';

-- next_batch with each event's W3C trace context (ADR 0030): next_batch's
-- columns stay as they are (callers number them WITH ORDINALITY).
CREATE FUNCTION pgq.next_batch_traced(stream text, consumer text, max_events integer DEFAULT 1000,
                                      wait interval DEFAULT '0',
                                      OUT batch_id bigint, OUT event_id bigint, OUT payload jsonb,
                                      OUT appended_at timestamptz, OUT traceparent text,
                                      OUT tracestate text)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'pgq_next_batch_traced' LANGUAGE C VOLATILE ROWS 1000;
COMMENT ON FUNCTION pgq.next_batch_traced(text, text, integer, interval) IS
    'next_batch with each event''s W3C trace context (traceparent, tracestate); consume right';

CREATE FUNCTION pgq.finish_batch(batch_id bigint)
RETURNS integer AS 'MODULE_PATHNAME', 'pgq_finish_batch' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.finish_batch(bigint) IS
    'moves the batch''s consumer past it; how many events it held; consume right';

-- pgq-relay --stream took pg_try_advisory_lock on a key any role could take
-- first. The guard is now a session lock with a tag of pgq's own, which no
-- SQL call can name: only these functions take and drop it, after checking
-- the consume right (src/pg/consumer_guard.h). No table: the lock ends with
-- its session, a crashed backend's too.
CREATE FUNCTION pgq.acquire_consumer(stream text, consumer text)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_acquire_consumer' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.acquire_consumer(text, text) IS
    'takes the consumer''s single-active guard for this session unless another session holds it; whether this session holds it now; consume right';

CREATE FUNCTION pgq.release_consumer(stream text, consumer text)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_release_consumer' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.release_consumer(text, text) IS
    'gives up the consumer''s single-active guard if this session holds it; whether it did; consume right';

CREATE FUNCTION pgq.grant_stream(role name, stream text, privilege text)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_grant_stream' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.grant_stream(name, text, text) IS
    'gives role the privilege (produce, consume or admin) on stream (NULL: every stream, by a superuser); true if it did not hold it yet; the stream''s owner';

CREATE FUNCTION pgq.revoke_stream(role name, stream text, privilege text)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_revoke_stream' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.revoke_stream(name, text, text) IS
    'takes back a grant made with pgq.grant_stream; true if there was one';

CREATE FUNCTION pgq.stream_consumer_stats(
    OUT stream text, OUT consumer text, OUT lag interval, OUT pending_events bigint,
    OUT batch_open boolean, OUT batch_age interval, OUT finished_events bigint,
    OUT last_finished_at timestamptz, OUT pending_capped boolean)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'pgq_stream_consumer_stats' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.stream_consumer_stats() IS
    'one row per consumer of the streams the reader holds a right on: how far behind it is';

-- Each stream's ring and segments, for any role with a right on the stream
-- (before: GRANT SELECT on pgq.streams, pgq.rings and pgq.ring_segments,
-- every stream's). state: current (taking appends), sealed (events some
-- consumer has not passed), empty (truncated).
CREATE FUNCTION pgq.stream_segments(
    stream text DEFAULT NULL,
    OUT stream_name text, OUT rotation interval, OUT segments integer,
    OUT current_segment integer, OUT rotations bigint, OUT rotated_at timestamptz,
    OUT segment integer, OUT state text, OUT bytes bigint, OUT opened_at timestamptz,
    OUT sealed_at timestamptz, OUT truncated_at timestamptz)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'pgq_stream_segments' LANGUAGE C STABLE ROWS 10;
COMMENT ON FUNCTION pgq.stream_segments(text) IS
    'each segment of a stream''s ring (NULL: of every stream the caller holds a right on): current, sealed or empty, its size and times; any right on the stream';

-- Monitoring (docs/operations.md, "Watching the queues") ----------------------

CREATE FUNCTION pgq.queue_metrics(
    OUT queue text, OUT ready bigint, OUT scheduled bigint, OUT running bigint,
    OUT expired bigint, OUT dead bigint, OUT oldest_ready_seconds double precision,
    OUT paused boolean, OUT claims bigint, OUT completions bigint, OUT failures bigint,
    OUT lease_expiries bigint, OUT dead_lettered bigint, OUT max_running integer,
    OUT awaiting_parents bigint, OUT estimated boolean)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'pgq_queue_metrics' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.queue_metrics() IS
    'one row per queue: jobs by state (each exact up to pgq.monitoring_count_limit, estimated past it: estimated), age of the oldest ready job, the counters since the server started (NULL without preload), the queue''s max_running and its jobs waiting for their parents';

-- The counters alone: what a dashboard samples for its rates, without the
-- gauges' count of every job.
CREATE FUNCTION pgq.queue_counters(
    OUT queue text, OUT claims bigint, OUT completions bigint, OUT failures bigint,
    OUT lease_expiries bigint, OUT dead_lettered bigint)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'pgq_queue_counters' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.queue_counters() IS
    'one row per queue: the counters of queue_metrics() (claims, completions, failed attempts, lease expiries, jobs dead-lettered since the server started) without its counts of jobs; no row without preload';

CREATE FUNCTION pgq.metrics()
RETURNS text AS 'MODULE_PATHNAME', 'pgq_metrics' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.metrics() IS
    'the queues and workers of this database in the Prometheus text format';

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

-- The sessions holding running claims of a queue, for its admin (before:
-- pg_monitor's pgq.workers, which shows pgq's background workers only).
CREATE FUNCTION pgq.queue_workers(
    queue text DEFAULT NULL,
    OUT queue_name text, OUT claimer_pid integer, OUT claimer_role name,
    OUT claimer_application text, OUT claimer_address inet, OUT claimer_connected boolean,
    OUT connected_since timestamptz, OUT running bigint, OUT oldest_claimed_at timestamptz,
    OUT newest_claimed_at timestamptz, OUT expired bigint)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'pgq_queue_workers' LANGUAGE C STABLE ROWS 10;
COMMENT ON FUNCTION pgq.queue_workers(text) IS
    'per queue and claiming session: its running jobs, oldest and newest claim, expired leases, and who it is (pg_stat_activity); admin right';


-- Issue 33 (ADR 0028): the queues' rings. Every queue keeps its plain jobs
-- on a ring of its own (pgq.job_log_<ring_id>), rows written once: entries,
-- receipts, closures; create_queue makes it, and the maintenance gives one
-- to a queue that has none (a queue of 2.0.1 after this update). Its ring
-- id is drawn from the streams' sequence, so pgq.rings holds both without a
-- clash.
ALTER TABLE pgq.queues ADD COLUMN ring_id integer;
-- dedupe_replaces: some enqueue of the queue had on_duplicate => 'replace'.
-- Its jobs with a dedupe key then stay rows of pgq.job_rows, where a replace
-- finds a pending holder through jobs_dedupe_idx (on a ring it would read
-- the ring: ADR 0028, "Dedupe keys on the rings").
ALTER TABLE pgq.queues ADD COLUMN dedupe_replaces boolean NOT NULL DEFAULT false;
-- fairness (3.1): 'group', its ready jobs are handed out across their group
-- keys in turn (ADR 0029, docs/fairness.md); NULL, in the order they came.
ALTER TABLE pgq.queues ADD COLUMN fairness text CHECK (fairness OPERATOR(pg_catalog.=) 'group');
-- rate_limit_per_key (3.1): at most that many of its jobs start per second
-- per group key, across every worker (NULL: no limit); its lanes hand out
-- in fair order to keep it.
ALTER TABLE pgq.queues ADD COLUMN rate_limit_per_key real;
-- max_pending (3.1): an enqueue, enqueue_many or publish that would take
-- the queue's unfinished jobs past it is refused whole (53400); NULL: no
-- limit (ADR 0029, "Backpressure, as built").
ALTER TABLE pgq.queues ADD COLUMN max_pending integer CHECK (max_pending OPERATOR(pg_catalog.>) 0);
CREATE TABLE pgq.job_log (
    ring         integer     NOT NULL,
    segment      smallint    NOT NULL,
    kind         "char"      NOT NULL,   -- e entry, a entry claimed as it was written, r receipt, c closure
    id           bigint      NOT NULL,
    attempt      integer     NOT NULL,   -- entry: attempts spent; receipt, closure: the attempt
    priority     integer,
    max_attempts integer,
    run_at       timestamptz,
    enqueued_at  timestamptz,
    lease_until  timestamptz,
    at           timestamptz,
    outcome      "char",                 -- closure: d done, f failed, e expired, r released, s snoozed, m moved to pgq.job_rows, x cancelled
    payload      jsonb,
    claimed_by   integer,                -- a claim's receipt: the claiming backend's pid
    group_key    text,                   -- entry: the job's group (a group's job on the ring holds a row of pgq.group_holds)
    dedupe_key   text,                   -- entry: the job's dedupe key (its row of pgq.dedupe_holds names it)
    dedupe_for   interval,               -- entry: how long the key stays taken after the job
    last_error   text,                   -- a claimed entry's: the error of its attempt before
    entry        bigint,                 -- a claimed entry ('a'), its receipts and closure: its claim's number (pgq.claim_seq)
    trace_context text                   -- entry: the job's trace (ADR 0030)
) PARTITION BY LIST (ring);
COMMENT ON TABLE pgq.job_log IS
    'jobs of the queues on rings (ADR 0028): a partition per queue (pgq.job_log_<ring>), each a ring of segments dropped by TRUNCATE';

-- The numbers of the entries claimed as they are written (kind 'a'): the
-- one thing that ties such an entry to its receipts and closure, whatever
-- a dump and restore does to the rows' places (3.0, ADR 0028 "Rows claimed
-- onto the rings").
CREATE SEQUENCE pgq.claim_seq AS bigint;
SELECT pg_catalog.pg_extension_config_dump('pgq.claim_seq', '');

-- A grouped job on a queue's ring (enqueued while its group had room): the
-- row that counts it in its group's room until it leaves the ring (done,
-- dead, cancelled, or back into pgq.job_rows, where its row counts). Rows
-- are inserted and deleted, never updated.
CREATE TABLE pgq.group_holds (
    job_id    bigint  NOT NULL PRIMARY KEY,
    queue_id  integer NOT NULL REFERENCES pgq.queues ON DELETE CASCADE,
    group_key text    NOT NULL
);
CREATE INDEX group_holds_group_idx ON pgq.group_holds (queue_id, group_key);
COMMENT ON TABLE pgq.group_holds IS
    'grouped jobs on the queues'' rings, each counted in its group''s room (ADR 0028)';
SELECT pg_catalog.pg_extension_config_dump('pgq.group_holds', '');

-- Weights of a fair queue's group keys (issue 34, ADR 0029): a key with
-- weight w gets w turns for each turn of a key of weight 1; a key without
-- a row weighs 1. Written by pgq.set_group_weight, read by the claims'
-- lanes (through the invalidation of pgq.queues, ADR 0027).
CREATE TABLE pgq.group_weights (
    queue_id  integer NOT NULL REFERENCES pgq.queues ON DELETE CASCADE,
    group_key text    NOT NULL,
    weight    integer NOT NULL CHECK (weight OPERATOR(pg_catalog.>=) 1 AND weight OPERATOR(pg_catalog.<=) 1000),
    PRIMARY KEY (queue_id, group_key)
);
COMMENT ON TABLE pgq.group_weights IS
    'weights of a fair queue''s group keys other than 1 (pgq.set_group_weight)';
SELECT pg_catalog.pg_extension_config_dump('pgq.group_weights', '');

CREATE FUNCTION pgq.set_group_weight(queue text, group_key text, weight integer)
RETURNS void AS 'MODULE_PATHNAME', 'pgq_set_group_weight' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.set_group_weight(text, text, integer) IS
    'sets how many turns a group key of a fair queue gets for each turn of a key of weight 1 (1-1000; 1 or NULL: the default); admin right';

CREATE FUNCTION pgq.group_weights(queue text, OUT group_key text, OUT weight integer)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'pgq_group_weights' LANGUAGE C STABLE ROWS 10;
COMMENT ON FUNCTION pgq.group_weights(text) IS
    'the group keys of a queue whose weight is not 1, with their weights; any right';

CREATE FUNCTION pgq.fair_keys(
    queue text, max_keys integer DEFAULT 20,
    OUT group_key text, OUT weight integer, OUT held integer, OUT more boolean,
    OUT running integer, OUT served bigint, OUT waiting interval)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'pgq_fair_keys' LANGUAGE C VOLATILE ROWS 20;
COMMENT ON FUNCTION pgq.fair_keys(text, integer) IS
    'the busiest group keys of a fair queue (the most claims since each became active first): weight, ready jobs its lane holds sorted, whether more wait, jobs running, claims, how long its next job has been ready; any right';

-- Backpressure (issue 34, ADR 0029): a producer waits here for the room
-- max_pending refused it, woken by the commits that finish jobs.
CREATE FUNCTION pgq.wait_for_room(queue text, wait interval DEFAULT '0')
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_wait_for_room' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.wait_for_room(text, interval) IS
    'sleeps up to wait until the queue''s unfinished jobs are below its low-water mark (nine tenths of max_pending, rounded up), woken by the commits that finish its jobs; true if they are (at once without max_pending), false if the wait ran out; produce or admin right';

CREATE FUNCTION pgq.check_pending(queue text, OUT kept bigint, OUT found bigint)
RETURNS record AS 'MODULE_PATHNAME', 'pgq_check_pending' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.check_pending(text) IS
    'counts the queue''s unfinished jobs (rows, ring entries, dedupe followers) and compares them with the count max_pending keeps: kept (NULL if it was not kept yet) and found, at the same instant; the kept count becomes what was found; admin right';

-- The rings of dropped queues and streams whose tables are still there: a
-- partition's DROP locks its root ACCESS EXCLUSIVE until the transaction
-- ends (every reader of every ring would wait for an open drop_queue of any
-- team), so drop_queue and drop_stream take the ring out of pgq.rings and
-- list it here, and the maintenance drops its tables when it gets the lock
-- at once (pg/segments.h DropRetired). Dumped, with the tables it names.
CREATE TABLE pgq.rings_dropped (
    root       text        NOT NULL CHECK (root OPERATOR(pg_catalog.=) ANY (ARRAY['job_log', 'stream_events'])),
    ring_id    integer     NOT NULL,
    dropped_at timestamptz NOT NULL,
    PRIMARY KEY (root, ring_id)
);
COMMENT ON TABLE pgq.rings_dropped IS
    'rings of dropped queues and streams whose tables the maintenance has still to drop (ADR 0028)';
SELECT pg_catalog.pg_extension_config_dump('pgq.rings_dropped', '');

-- A queue's rings past its first (ADR 0028, "Priorities: a ring per
-- priority served"): pgq.queues.ring_id holds its jobs of priority 0, and
-- each other priority it serves on rings (three at most) has a ring of its
-- own, given by the maintenance once an enqueue of that priority asks for
-- one (until then its jobs wait in pgq.job_rows, claimed from there in
-- order). Dumped, with the tables it names.
CREATE TABLE pgq.priority_rings (
    queue_id integer NOT NULL,
    priority integer NOT NULL CHECK (priority OPERATOR(pg_catalog.<>) 0),
    ring_id  integer NOT NULL UNIQUE,
    PRIMARY KEY (queue_id, priority)
);
COMMENT ON TABLE pgq.priority_rings IS
    'the rings of a queue''s priorities other than 0 (ADR 0028); written by the maintenance and drop_queue';
SELECT pg_catalog.pg_extension_config_dump('pgq.priority_rings', '');

-- Every ring of every queue, with the priority its jobs have: what the
-- readers join pgq.ring_jobs to. Internal, not granted.
CREATE VIEW pgq.queue_rings AS
SELECT q.queue_id, 0 AS priority, q.ring_id FROM pgq.queues q WHERE q.ring_id IS NOT NULL
UNION ALL
SELECT p.queue_id, p.priority, p.ring_id FROM pgq.priority_rings p;
COMMENT ON VIEW pgq.queue_rings IS
    'every ring of every queue and the priority of its jobs (ADR 0028); internal';

-- The rings of one queue, for the readers that read a queue's rings one at
-- a time (LATERAL: each ring's partitions pruned as the statement runs);
-- none for a caller without a right on the queue. In C, so that the
-- planner takes it for the row or so it returns (ROWS 1): pgq.priority_rings
-- is tiny and rarely analyzed, and the view over it was estimated at ten
-- default pages of rows, which made every reader's plan sort every ring a
-- dozen times over on paper, enough to be compiled by JIT at each call
-- (1.5 s measured).
CREATE FUNCTION pgq.queue_ring_ids(queue_id integer) RETURNS SETOF integer
    AS 'MODULE_PATHNAME', 'pgq_queue_ring_ids' LANGUAGE C STABLE STRICT ROWS 1;
COMMENT ON FUNCTION pgq.queue_ring_ids(integer) IS
    'the rings of a queue the caller holds a right on (ADR 0028); internal, read by pgq''s readers';

-- Issue 33 (step 2e, ADR 0028): a ring job's current state from its rows,
-- the one definition every reader uses (pgq.job, list_jobs, queue_stats,
-- running_jobs, queue_overview, the metrics). One row per job of a ring
-- that has not finished: pending ('p': its newest entry, attempt = the
-- attempts spent) or running ('r': a receipt of a later attempt, the
-- newest one's attempt and lease, claimed_at and claimed_by its first
-- receipt's: the claim's time and the claiming backend's pid). A
-- closure of a later attempt than the newest entry ends it: done, or moved
-- into pgq.job_rows (where the readers find it). A full read of the ring's rows
-- grouped by id (a filter on ring or id reaches the scan); the payload is
-- the entry's (every entry of a job carries the same), aggregated only
-- where a reader asks for it. The newest receipt is the one of the highest
-- attempt, then the latest: the arrays order by the attempt (as a
-- timestamp), then the time. The id is read as id + 0, so that no filter
-- on it is ever answered through an index of the segments: they have none
-- (pg/job_ring appends without index inserts, so none could be kept
-- right). A row of pgq.job_rows claimed onto the ring (an entry 'a': its
-- entry and its claim's receipt in one row) is read apart, by its claim's
-- number (the second branch: it and its receipts and closure carry it in
-- `entry`, since its id and attempt may repeat in a ring): running until
-- a closure names it, with its newest receipt's lease and its last_error
-- (NULL for the entries 'e', which keep none). Not granted: read through the functions
-- and views that check queue rights.
CREATE VIEW pgq.ring_jobs AS
SELECT g.ring,
       g.id,
       (CASE WHEN g.claimed OPERATOR(pg_catalog.>) g.entered THEN 'r' ELSE 'p' END)::pg_catalog."char" AS state,
       CASE WHEN g.claimed OPERATOR(pg_catalog.>) g.entered THEN g.claimed ELSE g.entered END AS attempt,
       g.max_attempts,
       g.priority,
       g.run_at,
       g.enqueued_at,
       CASE WHEN g.claimed OPERATOR(pg_catalog.>) g.entered THEN g.first_receipt[2] END AS claimed_at,
       CASE WHEN g.claimed OPERATOR(pg_catalog.>) g.entered THEN g.last_receipt[3] END AS lease_until,
       g.payload,
       CASE WHEN g.claimed OPERATOR(pg_catalog.>) g.entered
            THEN pg_catalog.date_part('epoch', g.first_receipt[3])::integer END AS claimed_by,
       g.group_key,
       g.dedupe_key,
       g.dedupe_for,
       NULL::text AS last_error,
       g.trace_context
  FROM (SELECT l.ring,
               l.id OPERATOR(pg_catalog.+) 0 AS id,
               pg_catalog.max(l.attempt) FILTER (WHERE l.kind OPERATOR(pg_catalog.=) 'e') AS entered,
               pg_catalog.max(l.attempt) FILTER (WHERE l.kind OPERATOR(pg_catalog.=) 'r') AS claimed,
               pg_catalog.max(l.attempt) FILTER (WHERE l.kind OPERATOR(pg_catalog.=) 'c') AS closed,
               pg_catalog.max(l.max_attempts) FILTER (WHERE l.kind OPERATOR(pg_catalog.=) 'e') AS max_attempts,
               pg_catalog.max(l.priority) FILTER (WHERE l.kind OPERATOR(pg_catalog.=) 'e') AS priority,
               pg_catalog.max(l.run_at) FILTER (WHERE l.kind OPERATOR(pg_catalog.=) 'e') AS run_at,
               pg_catalog.max(l.enqueued_at) FILTER (WHERE l.kind OPERATOR(pg_catalog.=) 'e') AS enqueued_at,
               pg_catalog.min(ARRAY[pg_catalog.to_timestamp(OPERATOR(pg_catalog.-) l.attempt), l.at,
                                    pg_catalog.to_timestamp(l.claimed_by)])
                   FILTER (WHERE l.kind OPERATOR(pg_catalog.=) 'r') AS first_receipt,
               pg_catalog.max(ARRAY[pg_catalog.to_timestamp(l.attempt), l.at, l.lease_until])
                   FILTER (WHERE l.kind OPERATOR(pg_catalog.=) 'r') AS last_receipt,
               (pg_catalog.array_agg(l.payload) FILTER (WHERE l.kind OPERATOR(pg_catalog.=) 'e'))[1] AS payload,
               pg_catalog.max(l.group_key) FILTER (WHERE l.kind OPERATOR(pg_catalog.=) 'e') AS group_key,
               pg_catalog.max(l.dedupe_key) FILTER (WHERE l.kind OPERATOR(pg_catalog.=) 'e') AS dedupe_key,
               pg_catalog.max(l.dedupe_for) FILTER (WHERE l.kind OPERATOR(pg_catalog.=) 'e') AS dedupe_for,
               pg_catalog.max(l.trace_context) FILTER (WHERE l.kind OPERATOR(pg_catalog.=) 'e') AS trace_context
          FROM pgq.job_log l
         WHERE l.entry IS NULL
         GROUP BY l.ring, l.id OPERATOR(pg_catalog.+) 0) g
 WHERE g.entered IS NOT NULL
   AND (g.closed IS NULL OR g.closed OPERATOR(pg_catalog.<=) g.entered)
UNION ALL
SELECT a.ring,
       a.id,
       'r'::pg_catalog."char",
       a.attempt,
       a.max_attempts,
       a.priority,
       a.run_at,
       a.enqueued_at,
       a.claimed_at,
       a.newest[2],
       a.payload,
       a.claimed_by,
       a.group_key,
       a.dedupe_key,
       a.dedupe_for,
       a.last_error,
       a.trace_context
  FROM (SELECT l.ring,
               pg_catalog.max(l.id) OPERATOR(pg_catalog.+) 0 AS id,
               pg_catalog.bool_or(l.kind OPERATOR(pg_catalog.=) 'c') AS closed,
               pg_catalog.max(l.attempt) FILTER (WHERE l.kind OPERATOR(pg_catalog.=) 'a') AS attempt,
               pg_catalog.max(l.max_attempts) FILTER (WHERE l.kind OPERATOR(pg_catalog.=) 'a') AS max_attempts,
               pg_catalog.max(l.priority) FILTER (WHERE l.kind OPERATOR(pg_catalog.=) 'a') AS priority,
               pg_catalog.max(l.run_at) FILTER (WHERE l.kind OPERATOR(pg_catalog.=) 'a') AS run_at,
               pg_catalog.max(l.enqueued_at) FILTER (WHERE l.kind OPERATOR(pg_catalog.=) 'a') AS enqueued_at,
               pg_catalog.max(l.at) FILTER (WHERE l.kind OPERATOR(pg_catalog.=) 'a') AS claimed_at,
               pg_catalog.max(ARRAY[l.at, l.lease_until])
                   FILTER (WHERE l.kind OPERATOR(pg_catalog.=) ANY (ARRAY['a', 'r']::pg_catalog."char"[])) AS newest,
               (pg_catalog.array_agg(l.payload) FILTER (WHERE l.kind OPERATOR(pg_catalog.=) 'a'))[1] AS payload,
               pg_catalog.max(l.claimed_by) FILTER (WHERE l.kind OPERATOR(pg_catalog.=) 'a') AS claimed_by,
               pg_catalog.max(l.group_key) FILTER (WHERE l.kind OPERATOR(pg_catalog.=) 'a') AS group_key,
               pg_catalog.max(l.dedupe_key) FILTER (WHERE l.kind OPERATOR(pg_catalog.=) 'a') AS dedupe_key,
               pg_catalog.max(l.dedupe_for) FILTER (WHERE l.kind OPERATOR(pg_catalog.=) 'a') AS dedupe_for,
               pg_catalog.max(l.last_error) FILTER (WHERE l.kind OPERATOR(pg_catalog.=) 'a') AS last_error,
               pg_catalog.max(l.trace_context) FILTER (WHERE l.kind OPERATOR(pg_catalog.=) 'a') AS trace_context
          FROM pgq.job_log l
         WHERE l.entry IS NOT NULL
         GROUP BY l.ring, l.entry) a
 WHERE a.attempt IS NOT NULL AND NOT a.closed;
COMMENT ON VIEW pgq.ring_jobs IS
    'the unfinished jobs of the queues'' rings (ADR 0028): pending or running, from their rows; internal, read by pgq''s readers';

-- Issue 33 (ADR 0028, step 3): pgq.jobs, every unfinished job with
-- pgq.jobs' columns of 2.x — the rows of pgq.job_rows (the jobs kept as
-- rows: scheduled, waiting, grouped, deduplicated, with parents, and those
-- claimed from there) and the jobs on the queues' rings (pgq.ring_jobs:
-- no error, progress or parents; a running ring job's
-- claimed_by from its claim's receipt; has_dependents from its children's
-- pairs). Read-only, not granted, as the
-- table was: for an administrator's psql. Functions and views of pgq read
-- pgq.job_rows and pgq.ring_jobs apart.
CREATE VIEW pgq.jobs AS
SELECT j.id, j.queue_id, j.state, j.priority, j.run_at, j.attempt, j.max_attempts,
       j.lease_until, j.enqueued_at, j.dedupe_key, j.group_key, j.last_error, j.payload,
       j.claimed_by, j.claimed_at, j.progress, j.dedupe_for, j.open_parents, j.has_dependents,
       j.trace_context, j.trace_links
  FROM pgq.job_rows j
UNION ALL
SELECT r.id, q.queue_id, r.state, r.priority, r.run_at, r.attempt, r.max_attempts,
       r.lease_until, r.enqueued_at, r.dedupe_key, r.group_key, r.last_error, r.payload,
       r.claimed_by, r.claimed_at, NULL::jsonb, r.dedupe_for, NULL::integer,
       (SELECT true FROM pgq.job_dependencies d
         WHERE d.parent_id OPERATOR(pg_catalog.=) r.id LIMIT 1),
       r.trace_context, NULL::text[]
  FROM pgq.ring_jobs r JOIN pgq.queue_rings q ON q.ring_id OPERATOR(pg_catalog.=) r.ring;
COMMENT ON VIEW pgq.jobs IS
    'every unfinished job: the rows of pgq.job_rows and the jobs on the queues'' rings (ADR 0028), with the columns pgq.jobs had in 2.x';


-- Views =====================================================================

-- The views show the queues (and streams) on which the reader holds some
-- right, and are security barriers: a function in the reader's WHERE clause
-- never sees the rows of other queues.

-- queue_stats: the age of the oldest ready job leaves out a row it could
-- not subtract, so no stored row can make the view fail; jobs waiting for
-- their parents are neither ready nor scheduled but counted apart
-- (awaiting_parents), beside the queue's max_running; the dead jobs counted
-- are those its readers show: within their queue's keep_dead (a row past it
-- may wait on disk for its ring to turn).
CREATE VIEW pgq.queue_stats WITH (security_barrier) AS
SELECT q.name                                   AS queue,
       COALESCE(j.ready, 0) OPERATOR(pg_catalog.+) COALESCE(g.ready, 0) AS ready,
       COALESCE(j.scheduled, 0) OPERATOR(pg_catalog.+) COALESCE(g.scheduled, 0) AS scheduled,
       COALESCE(j.running, 0) OPERATOR(pg_catalog.+) COALESCE(g.running, 0) AS running,
       COALESCE(j.expired, 0) OPERATOR(pg_catalog.+) COALESCE(g.expired, 0) AS expired,
       (SELECT pg_catalog.count(*) FROM pgq.dead_jobs d
         WHERE d.queue OPERATOR(pg_catalog.=) q.name
           AND (q.keep_dead IS NULL
                OR d.died_at OPERATOR(pg_catalog.+) q.keep_dead OPERATOR(pg_catalog.>) c.now)) AS dead,
       (SELECT COALESCE(pg_catalog.sum(f.jobs), 0) FROM pgq.finished f
         WHERE f.queue_id OPERATOR(pg_catalog.=) q.queue_id
           AND f.finished_at OPERATOR(pg_catalog.>=) (c.now OPERATOR(pg_catalog.-) q.retention))
         OPERATOR(pg_catalog.+) pgq.unflushed_completions(q.queue_id) AS done_recent,
       c.now OPERATOR(pg_catalog.-) LEAST(j.oldest_ready, g.oldest_ready) AS oldest_ready_age,
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
          FROM pgq.job_rows jj CROSS JOIN (SELECT pgq.clock() AS now) cc
         GROUP BY jj.queue_id
       ) j ON j.queue_id OPERATOR(pg_catalog.=) q.queue_id
  -- The jobs of the queue's rings (pgq.ring_jobs): pending or running. Read
  -- per ring of each queue shown (LATERAL, kept a subquery by OFFSET 0: the
  -- equality on the ring prunes the other rings as the statement runs), so
  -- that a reader never reads the rings of queues it holds no right on.
  LEFT JOIN LATERAL (
        SELECT pg_catalog.count(*) FILTER (WHERE gg.state OPERATOR(pg_catalog.=) 'p'
                                             AND gg.run_at OPERATOR(pg_catalog.<=) c.now) AS ready,
               pg_catalog.count(*) FILTER (WHERE gg.state OPERATOR(pg_catalog.=) 'p'
                                             AND gg.run_at OPERATOR(pg_catalog.>) c.now)  AS scheduled,
               pg_catalog.count(*) FILTER (WHERE gg.state OPERATOR(pg_catalog.=) 'r')       AS running,
               pg_catalog.count(*) FILTER (WHERE gg.state OPERATOR(pg_catalog.=) 'r'
                                             AND gg.lease_until OPERATOR(pg_catalog.<) c.now) AS expired,
               pg_catalog.min(gg.run_at) FILTER (WHERE gg.state OPERATOR(pg_catalog.=) 'p'
                                             AND gg.run_at OPERATOR(pg_catalog.<=) c.now
                                             AND pg_catalog.isfinite(gg.run_at)) AS oldest_ready
          FROM pgq.queue_ring_ids(q.queue_id) qr(ring_id)
               CROSS JOIN LATERAL (SELECT * FROM pgq.ring_jobs r
                                    WHERE r.ring OPERATOR(pg_catalog.=) qr.ring_id OFFSET 0) gg
       ) g ON true
 WHERE pgq.has_queue_privilege(q.name, 'produce, consume, admin');
COMMENT ON VIEW pgq.queue_stats IS 'one row per queue: ready (including jobs waiting behind the head of their FIFO group), scheduled, running, expired, dead, done_recent, oldest_ready_age, paused';

CREATE VIEW pgq.schedules WITH (security_barrier) AS
SELECT r.name, q.name AS queue, r.spec, r.next_run_at, r.last_run_at, r.last_job_id,
       (r.last_job_id IS NOT NULL AND EXISTS (
            SELECT 1 FROM pgq.job_rows j WHERE j.id OPERATOR(pg_catalog.=) r.last_job_id)) AS running,
       r.timezone, r.payload
  FROM pgq.recurring r
  JOIN pgq.queues q ON q.queue_id OPERATOR(pg_catalog.=) r.queue_id
 WHERE pgq.has_queue_privilege(q.name, 'produce, consume, admin');
COMMENT ON VIEW pgq.schedules IS 'one row per schedule: its next slot, its last run and whether that run is still pending or running';

GRANT SELECT ON pgq.queue_stats, pgq.schedules TO PUBLIC;

-- The running jobs of the queues' rings the caller holds any right on,
-- from the lease map in shared memory (ADR 0028): what pgq.running_jobs
-- shows of the rings, at a cost bounded by the running jobs, not by what
-- the rings hold. Internal (the view's); no row without preload.
CREATE FUNCTION pgq.ring_running_jobs(
    OUT id bigint, OUT queue_id integer, OUT attempt integer, OUT max_attempts integer,
    OUT claimed_at timestamptz, OUT lease_until timestamptz, OUT claimed_by integer,
    OUT enqueued_at timestamptz)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'pgq_ring_running_jobs' LANGUAGE C STABLE ROWS 100;
COMMENT ON FUNCTION pgq.ring_running_jobs() IS
    'the running jobs of the queues'' rings the caller holds a right on, from the lease map (ADR 0028); read by pgq.running_jobs';

-- One row per running job of the queues the reader holds a right on (as in
-- queue_stats), with who claimed it as pg_stat_activity knows that session
-- (NULL where the reader may not see it, and once the session is gone; a
-- running job of a queue's ring: its claim's receipt records the pid).
CREATE VIEW pgq.running_jobs WITH (security_barrier) AS
SELECT j.id,
       q.name                                             AS queue,
       j.attempt,
       j.max_attempts,
       j.claimed_at,
       c.now OPERATOR(pg_catalog.-) j.claimed_at          AS running_for,
       j.lease_until,
       j.lease_until OPERATOR(pg_catalog.-) c.now         AS lease_left,
       j.lease_until OPERATOR(pg_catalog.<) c.now         AS expired,
       j.claimed_by                                       AS claimer_pid,
       a.usename                                          AS claimer_role,
       a.application_name                                 AS claimer_application,
       a.client_addr                                      AS claimer_address,
       a.pid IS NOT NULL                                  AS claimer_connected,
       j.group_key,
       j.enqueued_at
  FROM pgq.job_rows j
  JOIN pgq.queues q ON q.queue_id OPERATOR(pg_catalog.=) j.queue_id
 CROSS JOIN (SELECT pgq.clock() AS now) c
  -- A pid is reused once its session ends: only a session that began
  -- before the claim is the claimer (backend_start is NULL to a reader who
  -- may not see that session's details).
  LEFT JOIN pg_catalog.pg_stat_activity a
         ON a.pid OPERATOR(pg_catalog.=) j.claimed_by
        AND (a.backend_start IS NULL OR a.backend_start OPERATOR(pg_catalog.<=) j.claimed_at)
 WHERE j.state OPERATOR(pg_catalog.=) 'r'
   AND pgq.has_queue_privilege(q.name, 'produce, consume, admin')
UNION ALL
SELECT g.id,
       q.name,
       g.attempt,
       g.max_attempts,
       g.claimed_at,
       c.now OPERATOR(pg_catalog.-) g.claimed_at,
       g.lease_until,
       g.lease_until OPERATOR(pg_catalog.-) c.now,
       g.lease_until OPERATOR(pg_catalog.<) c.now,
       g.claimed_by,
       a.usename,
       a.application_name,
       a.client_addr,
       a.pid IS NOT NULL,
       NULL,
       g.enqueued_at
  FROM pgq.ring_running_jobs() g
  JOIN pgq.queues q ON q.queue_id OPERATOR(pg_catalog.=) g.queue_id
 CROSS JOIN (SELECT pgq.clock() AS now) c
  LEFT JOIN pg_catalog.pg_stat_activity a
         ON a.pid OPERATOR(pg_catalog.=) g.claimed_by
        AND (a.backend_start IS NULL OR a.backend_start OPERATOR(pg_catalog.<=) g.claimed_at)
 WHERE pgq.has_queue_privilege(q.name, 'produce, consume, admin');
GRANT SELECT ON pgq.running_jobs TO PUBLIC;
COMMENT ON VIEW pgq.running_jobs IS
    'one row per running job of the queues the reader holds a right on: who claimed it (pg_stat_activity) and its lease';

-- The launcher and the workers of every database, as pg_stat_activity
-- shows them, with the end of each maintenance worker's last pass.
CREATE VIEW pgq.workers AS
SELECT a.pid,
       pg_catalog.substr(a.backend_type, 5)      AS kind,
       a.datname                                 AS database,
       a.backend_start                           AS started_at,
       w.last_pass                               AS last_pass_at,
       a.state,
       a.wait_event
  FROM pg_catalog.pg_stat_activity a
  LEFT JOIN pgq.worker_slots() w ON w.pid OPERATOR(pg_catalog.=) a.pid
 WHERE a.backend_type OPERATOR(pg_catalog.=) ANY (ARRAY['pgq launcher', 'pgq maintenance', 'pgq handler']);
GRANT SELECT ON pgq.workers TO pg_monitor;
COMMENT ON VIEW pgq.workers IS
    'the pgq background workers (launcher, maintenance, handlers) as pg_stat_activity shows them, with each maintenance worker''s last pass; pg_monitor';

CREATE VIEW pgq.stream_stats AS SELECT * FROM pgq.stream_consumer_stats();
GRANT SELECT ON pgq.stream_stats TO PUBLIC;
COMMENT ON VIEW pgq.stream_stats IS
    'one row per consumer of the streams the reader holds a right on: lag (age of its oldest unfinished event), pending events (counted up to pgq.monitoring_count_limit; pending_capped when there are more), its open batch';


-- Who may call what ==========================================================

-- Every role may call the functions that check a right themselves. The
-- coordination primitives and their readers are PostgreSQL's to grant, with
-- GRANT EXECUTE, and nobody's until then. The monitoring functions show
-- every queue (never a payload): pg_monitor's, not PUBLIC's.
REVOKE EXECUTE ON FUNCTION
    pgq.add_member(text, text),
    pgq.set_member_active(text, text, boolean),
    pgq.remove_member(text, text),
    pgq.next_turn(text),
    pgq.assign(text, text),
    pgq.set_switch(text, boolean),
    pgq.switch(text),
    pgq.advance(text, integer),
    pgq.once(text),
    pgq.list_teams(text, integer),
    pgq.list_switches(text, integer),
    pgq.list_ladders(text, integer)
  FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION pgq.metrics(), pgq.worker_slots() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgq.metrics(), pgq.worker_slots() TO pg_monitor;
REVOKE EXECUTE ON FUNCTION pgq.queue_counters() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgq.queue_counters() TO pg_monitor;
REVOKE EXECUTE ON FUNCTION pgq.queue_metrics() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgq.queue_metrics() TO pg_monitor;
