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

-- What an operator watches (docs/operations.md, "Watching the queues") -------

-- Who holds a running job: the claiming backend's pid and when it claimed
-- (set by every claim; pgq.running_jobs shows them).
ALTER TABLE pgq.jobs ADD COLUMN claimed_by integer, ADD COLUMN claimed_at timestamptz;

-- One row per running job of the queues the reader holds a right on (as in
-- queue_stats), with who claimed it as pg_stat_activity knows that session
-- (NULL where the reader may not see it, and once the session is gone).
CREATE VIEW pgq.running_jobs WITH (security_barrier) AS
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
  FROM pgq.jobs j
  JOIN pgq.queues q ON q.queue_id OPERATOR(pg_catalog.=) j.queue_id
 CROSS JOIN (SELECT pgq.clock() AS now) c
  -- A pid is reused once its session ends: only a session that began
  -- before the claim is the claimer (backend_start is NULL to a reader who
  -- may not see that session's details).
  LEFT JOIN pg_catalog.pg_stat_activity a
         ON a.pid OPERATOR(pg_catalog.=) j.claimed_by
        AND (a.backend_start IS NULL OR a.backend_start OPERATOR(pg_catalog.<=) j.claimed_at)
 WHERE j.state OPERATOR(pg_catalog.=) 'r'
   AND pgq.has_queue_privilege(q.name, 'produce, consume, admin');
GRANT SELECT ON pgq.running_jobs TO PUBLIC;

-- Every queue's depths and counters, for monitoring: one row per queue
-- (postgres_exporter's custom queries), or Prometheus text. They show every
-- queue (never a payload): EXECUTE is granted to pg_monitor, not PUBLIC.
CREATE FUNCTION pgq.queue_metrics(
    OUT queue text, OUT ready bigint, OUT scheduled bigint, OUT running bigint,
    OUT expired bigint, OUT dead bigint, OUT oldest_ready_seconds double precision,
    OUT paused boolean, OUT claims bigint, OUT completions bigint, OUT failures bigint,
    OUT lease_expiries bigint, OUT dead_lettered bigint)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'pgq_queue_metrics' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.queue_metrics() IS
    'one row per queue: jobs by state, age of the oldest ready job, and the counters since the server started (NULL without preload)';

CREATE FUNCTION pgq.metrics()
RETURNS text AS 'MODULE_PATHNAME', 'pgq_metrics' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.metrics() IS
    'the queues and workers of this database in the Prometheus text format';

CREATE FUNCTION pgq.worker_slots(OUT pid integer, OUT kind text, OUT database oid,
                                 OUT last_pass timestamptz)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'pgq_worker_slots' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.worker_slots() IS
    'the pgq background workers running, from shared memory (none without preload); see pgq.workers';

-- The launcher and the workers of every database, as pg_stat_activity
-- shows them, with the end of each maintenance worker's last pass.
CREATE VIEW pgq.workers AS
SELECT a.pid,
       pg_catalog.substr(a.backend_type, 5)      AS kind,
       a.datname                                 AS database,
       a.backend_start                           AS started_at,
       w.last_pass                               AS last_pass_at,
       a.state,
       a.wait_event
  FROM pg_catalog.pg_stat_activity a
  LEFT JOIN pgq.worker_slots() w ON w.pid OPERATOR(pg_catalog.=) a.pid
 WHERE a.backend_type OPERATOR(pg_catalog.=) ANY (ARRAY['pgq launcher', 'pgq maintenance', 'pgq handler']);

REVOKE EXECUTE ON FUNCTION pgq.queue_metrics(), pgq.metrics(), pgq.worker_slots() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgq.queue_metrics(), pgq.metrics(), pgq.worker_slots() TO pg_monitor;
GRANT SELECT ON pgq.workers TO pg_monitor;
