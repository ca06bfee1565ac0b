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

-- Per-queue rights (SPEC §7, docs/security.md, ADR 0010) ---------------------
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
SELECT pg_catalog.pg_extension_config_dump('pgq.grants', '');
COMMENT ON TABLE pgq.grants IS 'who holds which right on which queue (queue_id NULL: every queue); written by pgq.grant and pgq.revoke';

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

-- Every role may call the functions that check a queue right themselves
-- (the documented list in docs/security.md; test/python/test_privileges.py
-- checks that each of them refuses a role without one). The coordination
-- primitives are not about queues: they are PostgreSQL's to grant, with
-- GRANT EXECUTE, and nobody's until then.
GRANT USAGE ON SCHEMA pgq TO PUBLIC;
REVOKE EXECUTE ON FUNCTION
    pgq.add_member(text, text),
    pgq.set_member_active(text, text, boolean),
    pgq.remove_member(text, text),
    pgq.next_turn(text),
    pgq.assign(text, text),
    pgq.set_switch(text, boolean),
    pgq.switch(text),
    pgq.advance(text, integer),
    pgq.once(text)
  FROM PUBLIC;

-- The views show the queues on which the reader holds some right, and are
-- security barriers: a function in the reader's WHERE clause never sees
-- the rows of other queues.
CREATE OR REPLACE VIEW pgq.queue_stats WITH (security_barrier) AS
SELECT q.name                                   AS queue,
       COALESCE(j.ready, 0)                     AS ready,
       COALESCE(j.scheduled, 0)                 AS scheduled,
       COALESCE(j.running, 0)                   AS running,
       COALESCE(j.expired, 0)                   AS expired,
       (SELECT pg_catalog.count(*) FROM pgq.dead_jobs d
         WHERE d.queue OPERATOR(pg_catalog.=) q.name)                    AS dead,
       (SELECT COALESCE(pg_catalog.sum(f.jobs), 0) FROM pgq.finished f
         WHERE f.queue_id OPERATOR(pg_catalog.=) q.queue_id
           AND f.finished_at OPERATOR(pg_catalog.>=) (c.now OPERATOR(pg_catalog.-) q.retention))
         OPERATOR(pg_catalog.+) pgq.unflushed_completions(q.queue_id) AS done_recent,
       c.now OPERATOR(pg_catalog.-) j.oldest_ready AS oldest_ready_age,
       q.paused
  FROM pgq.queues q
 CROSS JOIN (SELECT pgq.clock() AS now) c
  LEFT JOIN (
        SELECT jj.queue_id,
               pg_catalog.count(*) FILTER (WHERE jj.state OPERATOR(pg_catalog.<>) 'r'
                                             AND jj.run_at OPERATOR(pg_catalog.<=) cc.now) AS ready,
               pg_catalog.count(*) FILTER (WHERE jj.state OPERATOR(pg_catalog.<>) 'r'
                                             AND jj.run_at OPERATOR(pg_catalog.>) cc.now)  AS scheduled,
               pg_catalog.count(*) FILTER (WHERE jj.state OPERATOR(pg_catalog.=) 'r')       AS running,
               pg_catalog.count(*) FILTER (WHERE jj.state OPERATOR(pg_catalog.=) 'r'
                                             AND jj.lease_until OPERATOR(pg_catalog.<) cc.now) AS expired,
               pg_catalog.min(jj.run_at) FILTER (WHERE jj.state OPERATOR(pg_catalog.<>) 'r'
                                             AND jj.run_at OPERATOR(pg_catalog.<=) cc.now) AS oldest_ready
          FROM pgq.jobs jj CROSS JOIN (SELECT pgq.clock() AS now) cc
         GROUP BY jj.queue_id
       ) j ON j.queue_id OPERATOR(pg_catalog.=) q.queue_id
 WHERE pgq.has_queue_privilege(q.name, 'produce, consume, admin');

CREATE OR REPLACE VIEW pgq.schedules WITH (security_barrier) AS
SELECT r.name, q.name AS queue, r.spec, r.next_run_at, r.last_run_at, r.last_job_id,
       (r.last_job_id IS NOT NULL AND EXISTS (
            SELECT 1 FROM pgq.jobs j WHERE j.id OPERATOR(pg_catalog.=) r.last_job_id)) AS running,
       r.timezone, r.payload
  FROM pgq.recurring r
  JOIN pgq.queues q ON q.queue_id OPERATOR(pg_catalog.=) r.queue_id
 WHERE pgq.has_queue_privilege(q.name, 'produce, consume, admin');

GRANT SELECT ON pgq.queue_stats, pgq.schedules TO PUBLIC;
