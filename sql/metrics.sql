-- Monitoring (docs/operations.md, "Watching the queues"): queue_metrics()
-- one row per queue, metrics() the same in the Prometheus text format.
-- Depths are read from the tables; the counters are counted at commit in
-- shared memory (the library is preloaded here).
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('mail', max_attempts => 1);
SELECT count(*) FROM (SELECT pgq.enqueue('mail', '{}') FROM generate_series(1, 4)) e;
SELECT pgq.enqueue('mail', '{}', run_at => now() + interval '1 hour') > 0 AS scheduled;
SELECT pgq.complete(id, attempt) FROM pgq.claim('mail', 1);
SELECT pgq.fail(id, attempt, 'boom') FROM pgq.claim('mail', 1);
SELECT count(*) AS running FROM pgq.claim('mail', 1);

SELECT queue, ready, scheduled, running, expired, dead, paused,
       oldest_ready_seconds >= 0 AS has_age,
       claims, completions, failures, lease_expiries, dead_lettered
  FROM pgq.queue_metrics();

-- The counters alone (what a dashboard samples for its rates), the same.
SELECT c.queue
  FROM pgq.queue_counters() c JOIN pgq.queue_metrics() m USING (queue)
 WHERE (c.claims, c.completions, c.failures, c.lease_expiries, c.dead_lettered)
       IS DISTINCT FROM (m.claims, m.completions, m.failures, m.lease_expiries, m.dead_lettered);
SELECT queue, claims, completions, failures FROM pgq.queue_counters();

-- The text format: one family of each, every queue labelled.
SELECT line FROM unnest(string_to_array(pgq.metrics(), E'\n')) AS line
 WHERE line ~ '^pgq_(jobs|claims_total|completions_total|failures_total|dead_lettered_total)'
   AND line ~ 'queue="mail"'
 ORDER BY line;
SELECT pgq.metrics() ~ '# TYPE pgq_oldest_ready_age_seconds gauge' AS typed;

-- Bounded per queue (2.0.1, issue 30 M1): each state is counted through an
-- index up to pgq.monitoring_count_limit and estimated past it from the
-- planner's statistics, marked (estimated; pgq_jobs_estimated), so a
-- producer that fills its queue does not make every team's scrape count
-- its jobs. A superuser's setting.
SELECT pgq.create_queue('deep');
SELECT count(*) AS enqueued FROM pgq.enqueue_many('deep', array_fill('{}'::jsonb, ARRAY[10]), priority => 1);
ANALYZE pgq.job_rows;
SELECT queue, ready, scheduled, running, estimated FROM pgq.queue_metrics() ORDER BY queue;
SET pgq.monitoring_count_limit = 3;
SELECT queue, ready, scheduled, running, estimated FROM pgq.queue_metrics() ORDER BY queue;
SELECT line FROM unnest(string_to_array(pgq.metrics(), E'\n')) AS line
 WHERE line ~ '^pgq_jobs(_estimated)?[{].*queue="deep"' AND line !~ 'state="(dead|expired|awaiting_parents)"'
 ORDER BY line;
RESET pgq.monitoring_count_limit;
CREATE ROLE pgq_metrics_watcher IN ROLE pg_monitor;
SET ROLE pgq_metrics_watcher;
SET pgq.monitoring_count_limit = 100000;
RESET ROLE;
DROP ROLE pgq_metrics_watcher;

DROP EXTENSION pgq_cpp;
