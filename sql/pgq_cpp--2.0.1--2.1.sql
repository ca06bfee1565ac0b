-- pgq_cpp 2.0.1 -> 2.1, run by ALTER EXTENSION pgq_cpp UPDATE (and after the
-- earlier scripts by a fresh CREATE EXTENSION). The rules of
-- pgq_cpp--1.0--1.1.sql hold: search_path pg_catalog only, every object of
-- ours qualified with pgq. and every operator with OPERATOR(pg_catalog.x).
--
-- Release 2.1 (issue 31): for the person on call and the team wiring it in.

\echo Use "ALTER EXTENSION pgq_cpp UPDATE" to load this file. \quit

-- ---------------------------------------------------------------------------
-- What a role may read about its own queues (read surfaces).
-- ---------------------------------------------------------------------------


-- ---------------------------------------------------------------------------
-- Monitoring that costs O(queues).
-- ---------------------------------------------------------------------------


-- ---------------------------------------------------------------------------
-- Batch completion (complete_many).
-- ---------------------------------------------------------------------------

