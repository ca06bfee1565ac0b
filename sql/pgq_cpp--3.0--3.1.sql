-- pgq_cpp 3.0 -> 3.1, run by ALTER EXTENSION pgq_cpp UPDATE. A fresh
-- CREATE EXTENSION runs the full script pgq_cpp--3.1.sql instead (ADR
-- 0024): every change here goes into that file too, as the objects' final
-- form; test/t/009_upgrade.pl proves the two agree. The rules of
-- pgq_cpp--1.0--1.1.sql hold: search_path pg_catalog only, every object of
-- ours qualified with pgq. and every operator with OPERATOR(pg_catalog.x).
--
-- Release 3.1 (issue 34): fair share, per-key rate limits and backpressure
-- (ADR 0029); (issue 35) W3C trace context on every job and event (ADR 0030).

\echo Use "ALTER EXTENSION pgq_cpp UPDATE" to load this file. \quit

-- enqueue_many takes group and dedupe keys: one for every payload, or one
-- per payload (a tenant's bulk import names its key in one call).
DROP FUNCTION pgq.enqueue_many(text, jsonb[], timestamp with time zone, integer, bigint[]);
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

-- Fairness across group keys (ADR 0029): a queue setting, create_queue's
-- and alter_queue's new last argument, queue_settings' new last column.
ALTER TABLE pgq.queues ADD COLUMN fairness text CHECK (fairness OPERATOR(pg_catalog.=) 'group');
-- rate_limit_per_key (3.1): at most that many of its jobs start per second
-- per group key, across every worker (NULL: no limit); its lanes hand out
-- in fair order to keep it.
ALTER TABLE pgq.queues ADD COLUMN rate_limit_per_key real;
-- max_pending (3.1): an enqueue, enqueue_many or publish that would take
-- the queue's unfinished jobs past it is refused whole (53400); NULL: no
-- limit (ADR 0029, "Backpressure, as built").
ALTER TABLE pgq.queues ADD COLUMN max_pending integer CHECK (max_pending OPERATOR(pg_catalog.>) 0);

DROP FUNCTION pgq.create_queue(text, integer, interval, interval, interval, interval, boolean, real, regprocedure, boolean, interval, interval, integer, integer);
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

DROP FUNCTION pgq.alter_queue(text, integer, interval, interval, interval, interval, boolean, real, regprocedure, interval, interval, integer, integer);
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

DROP FUNCTION pgq.queue_settings(text);
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

-- Trace context (issue 35, ADR 0030): one nullable column last in each
-- row that carries a job or an event, NULL when absent (a bit of the null
-- bitmap: no row grows). No default, so no table is rewritten. On
-- pgq.job_log and pgq.stream_events the column recurses to every ring and
-- segment; rings made later copy it (LIKE).
-- INVARIANT: never DROP COLUMN on pgq.job_log or pgq.stream_events: the
-- ring code forms their leaves' tuples by attribute number, and a ring made
-- later (LIKE, which skips dropped columns) would number them otherwise.
ALTER TABLE pgq.job_rows ADD COLUMN trace_context text, ADD COLUMN trace_links text[];
ALTER TABLE pgq.dedupe_followers ADD COLUMN trace_context text;
ALTER TABLE pgq.job_history ADD COLUMN trace_context text;
ALTER TABLE pgq.dead_jobs ADD COLUMN trace_context text, ADD COLUMN trace_links text[];
ALTER TABLE pgq.events ADD COLUMN trace_context text;
ALTER TABLE pgq.stream_events ADD COLUMN trace_context text;
ALTER TABLE pgq.job_log ADD COLUMN trace_context text;

ALTER TYPE pgq.job_info ADD ATTRIBUTE trace_id text, ADD ATTRIBUTE trace_context text;

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

DROP FUNCTION pgq.enqueue(text, jsonb, timestamp with time zone, integer, text, integer, text, interval, text, bigint[]);
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

DROP FUNCTION pgq.publish(text, jsonb, text, text);
CREATE FUNCTION pgq.publish(topic text, payload jsonb, dedupe_key text DEFAULT NULL,
                            group_key text DEFAULT NULL, traceparent text DEFAULT NULL,
                            tracestate text DEFAULT NULL)
RETURNS bigint AS 'MODULE_PATHNAME', 'pgq_publish' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.publish(text, jsonb, text, text, text, text) IS
    'records an event and enqueues one job per subscribed queue in the caller''s transaction; with group_key, each job joins that FIFO group of its queue (one per key in flight, in commit order); the event, its jobs and its stream events carry the W3C trace context given (else the setting pgq.trace_context); publish right on the topic';

DROP FUNCTION pgq.append(text, jsonb);
CREATE FUNCTION pgq.append(stream text, payload jsonb, traceparent text DEFAULT NULL,
                           tracestate text DEFAULT NULL)
RETURNS bigint AS 'MODULE_PATHNAME', 'pgq_append' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.append(text, jsonb, text, text) IS
    'appends an event to a stream, visible to its consumers when the transaction commits; its id; traceparent/tracestate (else the setting pgq.trace_context): its W3C trace context; produce right';

DROP FUNCTION pgq.append_many(text, jsonb[]);
CREATE FUNCTION pgq.append_many(stream text, payloads jsonb[], traceparent text DEFAULT NULL,
                                tracestate text DEFAULT NULL)
RETURNS SETOF bigint AS 'MODULE_PATHNAME', 'pgq_append_many' LANGUAGE C VOLATILE ROWS 100;
COMMENT ON FUNCTION pgq.append_many(text, jsonb[], text, text) IS
    'appends one event per payload, in order; their ids in input order; every event carries the W3C trace context given (else the setting pgq.trace_context); produce right';

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

CREATE OR REPLACE VIEW pgq.ring_jobs AS
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
CREATE OR REPLACE VIEW pgq.jobs AS
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

-- queue_stats reads pgq.ring_jobs through SELECT *, which a view stores as
-- the columns of its day: made again, it lists trace_context too (as a fresh
-- install's does).
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
