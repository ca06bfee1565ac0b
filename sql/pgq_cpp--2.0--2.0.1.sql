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

-- D4: a parent's completion releases a bounded number of its dependents in
-- its own transaction (as a parent's death dead-letters a bounded number);
-- a parent with more left is recorded here and maintenance releases the
-- rest in batches (src/store/dependencies.cpp). A 2.0 catalog without this
-- table releases every dependent at once, as 2.0 did.
CREATE TABLE pgq.dependency_releases (
    parent_id bigint      NOT NULL PRIMARY KEY,
    done_at   timestamptz NOT NULL
);
SELECT pg_catalog.pg_extension_config_dump('pgq.dependency_releases', '');
COMMENT ON TABLE pgq.dependency_releases IS
    'parents that completed whose dependents are still being released (made ready) by maintenance';


-- ---------------------------------------------------------------------------
-- Retention of history and dead-letter per queue (M2, retention lag).
-- ---------------------------------------------------------------------------


-- ---------------------------------------------------------------------------
-- Monitoring bounded per object; consumers per stream (M1).
-- ---------------------------------------------------------------------------


-- ---------------------------------------------------------------------------
-- The relay's single-active guard on a stream consumer (R1).
-- ---------------------------------------------------------------------------

