-- pgq_cpp 3.0 -> 3.1, run by ALTER EXTENSION pgq_cpp UPDATE. A fresh
-- CREATE EXTENSION runs the full script pgq_cpp--3.1.sql instead (ADR
-- 0024): every change here goes into that file too, as the objects' final
-- form; test/t/009_upgrade.pl proves the two agree. The rules of
-- pgq_cpp--1.0--1.1.sql hold: search_path pg_catalog only, every object of
-- ours qualified with pgq. and every operator with OPERATOR(pg_catalog.x).
--
-- Release 3.1 (issue 34): fair share, per-key rate limits and backpressure
-- (ADR 0029).

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
    dedupe_keys text[]      DEFAULT NULL)
RETURNS SETOF bigint AS 'MODULE_PATHNAME', 'pgq_enqueue_many' LANGUAGE C VOLATILE ROWS 100;
COMMENT ON FUNCTION pgq.enqueue_many(text, jsonb[], timestamp with time zone, integer, bigint[], text[], text[]) IS
    'adds one job per payload in one statement and returns their ids in input order; with after, each waits for those jobs (a fan-out behind one parent, or many children behind the same parents); group_keys and dedupe_keys: one key for every payload or one per payload (NULL: none), a taken dedupe key answered with its holder''s id as enqueue does; produce right';
