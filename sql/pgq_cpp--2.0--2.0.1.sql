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

