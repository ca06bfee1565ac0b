-- pgq_cpp 2.0.1 -> 3.0, run by ALTER EXTENSION pgq_cpp UPDATE. A fresh
-- CREATE EXTENSION runs the full script pgq_cpp--3.0.sql instead (ADR
-- 0024): every change here goes into that file too, as the objects' final
-- form; test/t/009_upgrade.pl proves the two agree. The rules of
-- pgq_cpp--1.0--1.1.sql hold: search_path pg_catalog only, every object of
-- ours qualified with pgq. and every operator with OPERATOR(pg_catalog.x).
--
-- Release 3.0 (issue 31): for the person on call and the team wiring it in.

\echo Use "ALTER EXTENSION pgq_cpp UPDATE" to load this file. \quit

-- Issue 33 (ADR 0028): the table of jobs is pgq.job_rows, the jobs kept as
-- rows; pgq.jobs becomes a view of every unfinished job, its rows and the
-- rings' jobs (created below, after pgq.ring_jobs). Views of 2.0.1 on the
-- table follow it by its oid.
ALTER TABLE pgq.jobs RENAME TO job_rows;
ALTER TABLE pgq.job_rows RENAME CONSTRAINT jobs_pkey TO job_rows_pkey;
COMMENT ON FUNCTION pgq.compact_jobs() IS
    'rewrites pgq.job_rows now if it is worth it (ADR 0008); owner of pgq.job_rows or superuser';
COMMENT ON TABLE pgq.job_rows IS 'the jobs kept as rows, every job not on a ring: pending, waiting and running (finished jobs leave it); pgq.jobs shows them with the rings'' jobs';

-- A group's jobs that hold a place in it (pending or running): the room it
-- has when one leaves (store/groups.cpp), found without reading its
-- waiting jobs (through jobs_group_idx, a group with a deep backlog made
-- every completion of it read the whole backlog).
CREATE INDEX jobs_group_live_idx ON pgq.job_rows (queue_id, group_key)
    WHERE group_key IS NOT NULL AND state OPERATOR(pg_catalog.=) ANY ('{p,r}'::pg_catalog."char"[]);

-- ---------------------------------------------------------------------------
-- What a role may read about its own queues (read surfaces).
-- ---------------------------------------------------------------------------

-- Why a job is dead (pgq.dead_jobs.reason: exhausted, cancelled, expired,
-- dependency_failed), NULL unless it is dead or cancelled. A new last
-- column: the 3.0 library fills as many columns as the installed type has,
-- so it also serves a 2.0.1 catalog. pgq.job_info is only returned as rows
-- (pgq.job, pgq.list_jobs), never tested as a whole row (ADR 0019's
-- `claim(...) IS NOT NULL`), and every client names its columns.
ALTER TYPE pgq.job_info ADD ATTRIBUTE dead_reason text;

-- list_jobs gains a reason filter, last, so that every 2.0.1 call means
-- what it meant.
DROP FUNCTION pgq.list_jobs(text, text, integer, bigint);
CREATE FUNCTION pgq.list_jobs(queue text, state text DEFAULT NULL, max integer DEFAULT 100,
                              before_id bigint DEFAULT NULL, reason text DEFAULT NULL)
RETURNS SETOF pgq.job_info AS 'MODULE_PATHNAME', 'pgq_list_jobs' LANGUAGE C STABLE ROWS 100;
COMMENT ON FUNCTION pgq.list_jobs(text, text, integer, bigint, text) IS
    'a queue''s jobs, newest first, max per page (next page: before_id => the last id), in state and dead for reason if given; rights as pgq.job';

-- cancel and retry_dead that say why nothing happened (the boolean ones
-- keep their contract). Rights as theirs; a job of a queue the caller has
-- no right on answers not_found, as an unknown id.
CREATE FUNCTION pgq.cancel_job(id bigint)
RETURNS text AS 'MODULE_PATHNAME', 'pgq_cancel_job' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.cancel_job(bigint) IS
    'cancel(id) with its outcome: cancelled, not_found, already_completed, already_dead or already_cancelled; produce or admin right';
CREATE FUNCTION pgq.retry_dead_job(id bigint)
RETURNS text AS 'MODULE_PATHNAME', 'pgq_retry_dead_job' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.retry_dead_job(bigint) IS
    'retry_dead(id) with its outcome: retried, not_found, not_dead, already_completed or dedupe_key_taken; admin right';

-- A queue's settings, for any role holding a right on it (before: a column
-- grant on pgq.queues).
CREATE FUNCTION pgq.queue_settings(
    queue text DEFAULT NULL,
    OUT queue_name text, OUT max_attempts integer, OUT lease interval,
    OUT backoff_base interval, OUT backoff_max interval, OUT retention interval,
    OUT keep_completed interval, OUT keep_dead interval, OUT notify boolean,
    OUT rate_limit real, OUT max_running integer, OUT group_concurrency integer,
    OUT handler text, OUT owner name, OUT paused boolean, OUT created_at timestamptz)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'pgq_queue_settings' LANGUAGE C STABLE ROWS 10;
COMMENT ON FUNCTION pgq.queue_settings(text) IS
    'the settings of a queue (NULL: of every queue the caller holds a right on); any right';

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

-- The runs of a queue's schedules, newest first, for its admin (before: a
-- grant on pgq.schedule_runs).
CREATE FUNCTION pgq.list_schedule_runs(
    queue text DEFAULT NULL, schedule text DEFAULT NULL, max integer DEFAULT 100,
    OUT schedule_name text, OUT queue_name text, OUT slot timestamptz,
    OUT fired_at timestamptz, OUT job_id bigint)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'pgq_list_schedule_runs' LANGUAGE C STABLE ROWS 100;
COMMENT ON FUNCTION pgq.list_schedule_runs(text, text, integer) IS
    'each firing of the schedules of a queue (NULL: of every queue the caller administers), newest first; admin right';

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
REVOKE EXECUTE ON FUNCTION pgq.list_teams(text, integer), pgq.list_switches(text, integer),
    pgq.list_ladders(text, integer) FROM PUBLIC;

-- One dead job deleted, with its outcome (the dashboard's bulk purge of the
-- selected jobs; purge_dead deletes by age). Admin right, as purge_dead; a
-- job of a queue the caller does not administer answers not_found, as an
-- unknown id.
CREATE FUNCTION pgq.purge_dead_job(id bigint)
RETURNS text AS 'MODULE_PATHNAME', 'pgq_purge_dead_job' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.purge_dead_job(bigint) IS
    'deletes one dead (or cancelled) job: purged, not_found or not_dead; admin right';


-- A job's workflow (SPEC §8): its parents not yet settled, its children
-- waiting for it and, once it is dead or cancelled, the dependents it took
-- with it (found by the last_error the cascade writes: no column records
-- the failed parent). Rights as pgq.job; related jobs of queues the caller
-- holds no right on are left out. The parents of a job are found by
-- child_id: an index for it (before, only the primary key's parent_id).
CREATE INDEX job_dependencies_child_idx ON pgq.job_dependencies (child_id);

CREATE FUNCTION pgq.job_dependencies(
    id bigint, max integer DEFAULT 100,
    OUT direction text, OUT job_id bigint, OUT queue text, OUT state text)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'pgq_job_dependencies' LANGUAGE C STABLE ROWS 10;
COMMENT ON FUNCTION pgq.job_dependencies(bigint, integer) IS
    'a job''s parents (direction parent), children (child) and the dependents it took with it when it died (taken), at most max of each; rights as pgq.job';

-- The live jobs whose dedupe or group key is key, across the queues the
-- caller holds a right on, newest first (through jobs_dedupe_idx and
-- jobs_group_idx); redaction as list_jobs.
CREATE FUNCTION pgq.find_jobs(key text, max integer DEFAULT 100)
RETURNS SETOF pgq.job_info AS 'MODULE_PATHNAME', 'pgq_find_jobs' LANGUAGE C STABLE ROWS 10;
COMMENT ON FUNCTION pgq.find_jobs(text, integer) IS
    'pending, running and waiting jobs whose dedupe_key or group_key is key, newest first, of the queues the caller holds a right on; rights as pgq.list_jobs';

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

-- ---------------------------------------------------------------------------
-- Monitoring that costs O(queues).
-- ---------------------------------------------------------------------------


-- ---------------------------------------------------------------------------
-- Batch completion (complete_many).
-- ---------------------------------------------------------------------------


-- ---------------------------------------------------------------------------
-- Issue 32 (H): history and dead-letter on segment rings
-- ---------------------------------------------------------------------------

-- The history and dead-letter rings of each retention class (ADR 0021)
-- become rings of the one ring layer, src/pg/segments (ADR 0026): their
-- ledger is pgq.rings / pgq.ring_segments like every stream's (ring ids
-- -1 - class for pgq.job_history, -21 - class for pgq.dead_jobs; streams'
-- ids are positive), and a turn no longer copies the rows still kept: a
-- sealed segment is truncated once every row in it is past its queue's keep.
-- The tables, their segments (pgq.job_history_0 .. _33, pgq.dead_jobs_0 ..
-- _33, pgq.dead_jobs_kept) and every row in them stay as they are: no row
-- is moved by this update. The maintenance pass adopts each ring on its
-- first run (src/pg/segments.h AdoptRing): its first segment current, every
-- other segment that holds rows sealed, truncated only once all its rows
-- are past their queue's keep. Until then writers put rows in each ring's
-- first segment, where the adopted ring starts.
DROP TABLE pgq.segment_rings;

-- The history and dead-letter rings' ledger rows are not dumped: the
-- restoring CREATE EXTENSION would collide with the rows maintenance
-- writes when it adopts them, and a restored ring is adopted again (its
-- restored rows are kept until past their keep). Streams' rings (positive
-- ids, made by create_stream) are dumped as before.
SELECT pg_catalog.pg_extension_config_dump('pgq.rings', 'WHERE ring_id OPERATOR(pg_catalog.>) 0');
SELECT pg_catalog.pg_extension_config_dump('pgq.ring_segments', 'WHERE ring_id OPERATOR(pg_catalog.>) 0');
COMMENT ON TABLE pgq.rings IS
    'rings of segment tables (streams; history and dead-letter per retention class, negative ids): which segment takes new rows; turned by maintenance';
COMMENT ON TABLE pgq.ring_segments IS
    'the segments of each ring and whether each is empty; a sealed segment is truncated once its owner says no reader needs its rows';
COMMENT ON TABLE pgq.job_history IS
    'completed jobs kept for their queue''s keep_completed, with their result; a ring of segments per retention class (pgq.rings)';
COMMENT ON TABLE pgq.dead_jobs IS
    'dead-letter: jobs whole, with their last error and the reason (exhausted, cancelled, expired); a ring of segments per retention class (pgq.rings), and pgq.dead_jobs_kept';
DO $segments$
DECLARE
    t text;
    s integer;
BEGIN
    FOREACH t IN ARRAY ARRAY['job_history', 'dead_jobs'] LOOP
        FOR s IN 0 .. 33 LOOP
            EXECUTE pg_catalog.format(
                'COMMENT ON TABLE pgq.%I IS %L',
                t OPERATOR(pg_catalog.||) '_' OPERATOR(pg_catalog.||) s,
                pg_catalog.format('a segment of pgq.%s (pgq.rings says which takes new rows)', t));
        END LOOP;
    END LOOP;
END
$segments$;

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
    entry        bigint                  -- a claimed entry ('a'), its receipts and closure: its claim's number (pgq.claim_seq)
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

-- pgq.dedupe_holds becomes the one place a dedupe key is taken (ADR 0028,
-- "Dedupe keys on the rings"): a live job's key too (held_until NULL), so
-- that a job on a ring can hold one. The live jobs of 2.0.1 with a key are
-- entered here (a live job wins over a period kept by a finished one).
COMMENT ON TABLE pgq.dedupe_holds IS
    'who holds each dedupe key: its live job (held_until NULL), or the job that finished with a dedupe_for, until held_until';
ALTER TABLE pgq.dedupe_holds ALTER COLUMN held_until DROP NOT NULL;
INSERT INTO pgq.dedupe_holds AS h (queue_id, dedupe_key, job_id, held_until)
SELECT j.queue_id, j.dedupe_key, j.id, NULL
  FROM pgq.job_rows j
 WHERE j.dedupe_key IS NOT NULL
ON CONFLICT (queue_id, dedupe_key) DO UPDATE SET job_id = excluded.job_id, held_until = NULL;

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
       NULL::text AS last_error
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
               pg_catalog.max(l.dedupe_for) FILTER (WHERE l.kind OPERATOR(pg_catalog.=) 'e') AS dedupe_for
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
       a.last_error
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
               pg_catalog.max(l.last_error) FILTER (WHERE l.kind OPERATOR(pg_catalog.=) 'a') AS last_error
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
       j.claimed_by, j.claimed_at, j.progress, j.dedupe_for, j.open_parents, j.has_dependents
  FROM pgq.job_rows j
UNION ALL
SELECT r.id, q.queue_id, r.state, r.priority, r.run_at, r.attempt, r.max_attempts,
       r.lease_until, r.enqueued_at, r.dedupe_key, r.group_key, r.last_error, r.payload,
       r.claimed_by, r.claimed_at, NULL::jsonb, r.dedupe_for, NULL::integer,
       (SELECT true FROM pgq.job_dependencies d
         WHERE d.parent_id OPERATOR(pg_catalog.=) r.id LIMIT 1)
  FROM pgq.ring_jobs r JOIN pgq.queue_rings q ON q.ring_id OPERATOR(pg_catalog.=) r.ring;
COMMENT ON VIEW pgq.jobs IS
    'every unfinished job: the rows of pgq.job_rows and the jobs on the queues'' rings (ADR 0028), with the columns pgq.jobs had in 2.x';

-- queue_stats and running_jobs count and show the rings' jobs too (their
-- grants and comments stay).
CREATE OR REPLACE VIEW pgq.queue_stats WITH (security_barrier) AS
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
CREATE OR REPLACE VIEW pgq.running_jobs WITH (security_barrier) AS
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
