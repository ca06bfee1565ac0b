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

