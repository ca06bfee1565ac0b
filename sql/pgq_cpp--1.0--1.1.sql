-- pgq_cpp 1.0 -> 1.1, run by ALTER EXTENSION pgq_cpp UPDATE (and after
-- pgq_cpp--1.0.sql by a fresh CREATE EXTENSION, which has no 1.1 script of
-- its own).
--
-- 1.0 is released: sql/pgq_cpp--1.0.sql is frozen, and every change to the
-- extension's SQL objects goes into an update script like this one, written
-- so that it also runs on a database holding live jobs. test/t/009_upgrade.pl
-- checks that 1.0 updated with jobs in flight ends with the same catalog as
-- a fresh install and loses none of them. The same hardening rules as the
-- install script hold: search_path is pg_catalog only, every object of ours
-- is qualified with pgq.

\echo Use "ALTER EXTENSION pgq_cpp UPDATE" to load this file. \quit

-- (No change yet: 1.1 is the version under development.)
