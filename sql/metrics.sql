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

DROP EXTENSION pgq_cpp;
