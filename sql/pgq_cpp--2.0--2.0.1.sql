-- pgq_cpp 2.0 -> 2.0.1, run by ALTER EXTENSION pgq_cpp UPDATE (and after the
-- earlier scripts by a fresh CREATE EXTENSION). The rules of
-- pgq_cpp--1.0--1.1.sql hold: search_path pg_catalog only, every object of
-- ours qualified with pgq. and every operator with OPERATOR(pg_catalog.x).
--
-- Release 2.0.1 (issue 30): the holes a second adversarial review of 2.0
-- found. docs/security.md says what each one was and what closed it.

\echo Use "ALTER EXTENSION pgq_cpp UPDATE" to load this file. \quit

-- ---------------------------------------------------------------------------
-- Dependencies and dedupe (D1, D3, D4).
-- ---------------------------------------------------------------------------


-- ---------------------------------------------------------------------------
-- Retention of history and dead-letter per queue (M2, retention lag).
-- ---------------------------------------------------------------------------


-- ---------------------------------------------------------------------------
-- Monitoring bounded per object; consumers per stream (M1).
-- ---------------------------------------------------------------------------
-- A stream's consumers are at most pgq.max_consumers_per_stream (a setting,
-- no catalog change) and each one's unfinished events are counted up to
-- pgq.monitoring_count_limit: stream_consumer_stats() says with a new
-- column when a count was cut there. The view is made again over it.
DROP VIEW pgq.stream_stats;
DROP FUNCTION pgq.stream_consumer_stats();
CREATE FUNCTION pgq.stream_consumer_stats(
    OUT stream text, OUT consumer text, OUT lag interval, OUT pending_events bigint,
    OUT batch_open boolean, OUT batch_age interval, OUT finished_events bigint,
    OUT last_finished_at timestamptz, OUT pending_capped boolean)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'pgq_stream_consumer_stats' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.stream_consumer_stats() IS
    'one row per consumer of the streams the reader holds a right on: how far behind it is';

CREATE VIEW pgq.stream_stats AS SELECT * FROM pgq.stream_consumer_stats();
GRANT SELECT ON pgq.stream_stats TO PUBLIC;
COMMENT ON VIEW pgq.stream_stats IS
    'one row per consumer of the streams the reader holds a right on: lag (age of its oldest unfinished event), pending events (counted up to pgq.monitoring_count_limit; pending_capped when there are more), its open batch';

-- queue_metrics() (and metrics()) count each state of a queue exactly up to
-- pgq.monitoring_count_limit and estimate past it, as queue_overview()
-- does: a new column says when.
DROP FUNCTION pgq.queue_metrics();
CREATE FUNCTION pgq.queue_metrics(
    OUT queue text, OUT ready bigint, OUT scheduled bigint, OUT running bigint,
    OUT expired bigint, OUT dead bigint, OUT oldest_ready_seconds double precision,
    OUT paused boolean, OUT claims bigint, OUT completions bigint, OUT failures bigint,
    OUT lease_expiries bigint, OUT dead_lettered bigint, OUT max_running integer,
    OUT awaiting_parents bigint, OUT estimated boolean)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'pgq_queue_metrics' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.queue_metrics() IS
    'one row per queue: jobs by state (each exact up to pgq.monitoring_count_limit, estimated past it: estimated), age of the oldest ready job, the counters since the server started (NULL without preload), the queue''s max_running and its jobs waiting for their parents';
REVOKE EXECUTE ON FUNCTION pgq.queue_metrics() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgq.queue_metrics() TO pg_monitor;


-- ---------------------------------------------------------------------------
-- The relay's single-active guard on a stream consumer (R1).
-- ---------------------------------------------------------------------------

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

