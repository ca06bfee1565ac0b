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

-- One ring per retention class instead of one per table (ADR 0021): a
-- queue's rows go to the ring of its own keep_completed / keep_dead, and a
-- ring turns on a period fixed by its class, so no queue's retention changes
-- when another queue's rows are copied or dropped. Class 0 (keeps under 2
-- minutes) keeps the rings 'history' and 'dead' (segments 0-3); class k
-- (1-10, keeps from 2 * 4^(k-1) minutes; class 10 from 364 days on) is
-- 'history_k' and 'dead_k' with the three segments from 4 + 3(k-1). Dead
-- jobs kept for good (keep_dead NULL, or their queue dropped) go to
-- pgq.dead_jobs_kept (segment 34),
-- which never turns. The classes are listed in src/store/retention.cpp.
ALTER TABLE pgq.segment_rings DROP CONSTRAINT segment_rings_ring_check;
ALTER TABLE pgq.segment_rings ADD CONSTRAINT segment_rings_ring_check
    CHECK (ring OPERATOR(pg_catalog.~) '^(history|dead)(_([1-9]|10))?$'::pg_catalog.text
           OR ring OPERATOR(pg_catalog.=) 'dead_kept'::pg_catalog.text);
DO $ring$
DECLARE
    k integer;
    s integer;
    t text;
    lo integer;
BEGIN
    FOR k IN 1..10 LOOP
        lo := 4 OPERATOR(pg_catalog.+) (3 OPERATOR(pg_catalog.*) (k OPERATOR(pg_catalog.-) 1));
        FOREACH t IN ARRAY ARRAY['job_history', 'dead_jobs'] LOOP
            FOR s IN lo .. lo OPERATOR(pg_catalog.+) 2 LOOP
                EXECUTE pg_catalog.format('CREATE TABLE pgq.%I PARTITION OF pgq.%I FOR VALUES IN (%s)',
                                          t OPERATOR(pg_catalog.||) '_' OPERATOR(pg_catalog.||) s, t, s);
                PERFORM pg_catalog.pg_extension_config_dump(
                    pg_catalog.format('pgq.%I', t OPERATOR(pg_catalog.||) '_' OPERATOR(pg_catalog.||) s)::pg_catalog.regclass, '');
                EXECUTE pg_catalog.format(
                    'COMMENT ON TABLE pgq.%I IS %L',
                    t OPERATOR(pg_catalog.||) '_' OPERATOR(pg_catalog.||) s,
                    pg_catalog.format('a segment of pgq.%s (pgq.segment_rings says which takes new rows)', t));
            END LOOP;
        END LOOP;
        INSERT INTO pgq.segment_rings (ring, segments, current, rotated_at)
        VALUES ('history_' OPERATOR(pg_catalog.||) k, 3, lo, pg_catalog.now()),
               ('dead_' OPERATOR(pg_catalog.||) k, 3, lo, pg_catalog.now());
    END LOOP;
END
$ring$;
CREATE TABLE pgq.dead_jobs_kept PARTITION OF pgq.dead_jobs FOR VALUES IN (34);
SELECT pg_catalog.pg_extension_config_dump('pgq.dead_jobs_kept', '');
COMMENT ON TABLE pgq.dead_jobs_kept IS
    'the dead jobs of queues that keep them for good (keep_dead NULL): never turned';
INSERT INTO pgq.segment_rings (ring, segments, current, rotated_at)
VALUES ('dead_kept', 1, 34, pg_catalog.now());
COMMENT ON TABLE pgq.segment_rings IS
    'which segment of pgq.job_history and pgq.dead_jobs takes new rows, per retention class; turned by maintenance';

-- queue_stats counts the dead jobs its readers show: those within their
-- queue's keep_dead (a row past it may wait on disk for its ring to turn).
CREATE OR REPLACE VIEW pgq.queue_stats WITH (security_barrier) AS
SELECT q.name                                   AS queue,
       COALESCE(j.ready, 0)                     AS ready,
       COALESCE(j.scheduled, 0)                 AS scheduled,
       COALESCE(j.running, 0)                   AS running,
       COALESCE(j.expired, 0)                   AS expired,
       (SELECT pg_catalog.count(*) FROM pgq.dead_jobs d
         WHERE d.queue OPERATOR(pg_catalog.=) q.name
           AND (q.keep_dead IS NULL
                OR d.died_at OPERATOR(pg_catalog.+) q.keep_dead OPERATOR(pg_catalog.>) c.now)) AS dead,
       (SELECT COALESCE(pg_catalog.sum(f.jobs), 0) FROM pgq.finished f
         WHERE f.queue_id OPERATOR(pg_catalog.=) q.queue_id
           AND f.finished_at OPERATOR(pg_catalog.>=) (c.now OPERATOR(pg_catalog.-) q.retention))
         OPERATOR(pg_catalog.+) pgq.unflushed_completions(q.queue_id) AS done_recent,
       c.now OPERATOR(pg_catalog.-) j.oldest_ready AS oldest_ready_age,
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
          FROM pgq.jobs jj CROSS JOIN (SELECT pgq.clock() AS now) cc
         GROUP BY jj.queue_id
       ) j ON j.queue_id OPERATOR(pg_catalog.=) q.queue_id
 WHERE pgq.has_queue_privilege(q.name, 'produce, consume, admin');



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

