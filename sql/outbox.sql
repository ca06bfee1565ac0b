-- The transactional outbox: subscribe, unsubscribe, publish.
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('passes');
SELECT pgq.create_queue('alerts', max_attempts => 2, backoff_base => '1 second');

CREATE FUNCTION pg_temp.error_of(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE sql;
  RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;

-- A topic is created first (by a role with admin on every queue, which owns
-- it); two queues subscribe to it; subscribing again changes nothing.
SELECT pgq.create_topic('orbit.changed');
SELECT pgq.create_topic('nobody.listens');
SELECT pgq.subscribe('orbit.changed', 'passes');
SELECT pgq.subscribe('orbit.changed', 'alerts');
SELECT pgq.subscribe('orbit.changed', 'alerts');
SELECT s.topic, q.name FROM pgq.subscriptions s JOIN pgq.queues q USING (queue_id) ORDER BY 2;

-- Published in a transaction that rolls back: no event, no job.
BEGIN;
SELECT pgq.publish('orbit.changed', '{"sat": 25544}') IS NOT NULL AS published_in_tx;
SELECT count(*) AS jobs_in_tx FROM pgq.jobs;
ROLLBACK;
SELECT count(*) AS events, (SELECT count(*) FROM pgq.jobs) AS jobs FROM pgq.events;

-- Committed: the event and one job per subscribed queue, carrying the
-- event's id, topic and payload.
SELECT pgq.publish('orbit.changed', '{"sat": 25544}') AS event_id \gset
SELECT topic, payload, dedupe_key FROM pgq.events;
SELECT q.name AS queue, j.payload = jsonb_build_object('event_id', :event_id, 'topic', 'orbit.changed',
                                                    'payload', '{"sat": 25544}'::jsonb) AS carries_event
  FROM pgq.jobs j JOIN pgq.queues q USING (queue_id) ORDER BY 1;

-- Each subscriber retries on its own: alerts fails and is retried, passes
-- completed once and is not run again.
SELECT pgq.complete(id, attempt) AS passes_done FROM pgq.claim('passes', 1);
SELECT pgq.fail(id, attempt, 'sms gateway down', retry_in => '0') AS alerts_failed FROM pgq.claim('alerts', 1);
SELECT q.name AS queue, j.attempt, j.last_error FROM pgq.jobs j JOIN pgq.queues q USING (queue_id);
SELECT count(*) AS passes_claimable_again FROM pgq.claim('passes', 1);
SELECT pgq.complete(id, attempt) AS alerts_done_on_retry FROM pgq.claim('alerts', 1);

-- A dedupe key makes publishing idempotent: the same event id, no new jobs.
SELECT pgq.publish('orbit.changed', '{"sat": 25544, "epoch": 1}', dedupe_key => 'tle-25544-1') AS e1 \gset
SELECT pgq.publish('orbit.changed', '{"sat": 25544, "epoch": 1}', dedupe_key => 'tle-25544-1') = :e1 AS same_event;
SELECT count(*) AS jobs_for_it FROM pgq.jobs WHERE (payload->>'event_id')::bigint = :e1;

-- No subscriber: the event is recorded, no job.
SELECT pgq.publish('nobody.listens', '{}') > :e1 AS recorded;
SELECT count(*) AS jobs FROM pgq.jobs WHERE payload->>'topic' = 'nobody.listens';

-- Unsubscribed queues get nothing more.
SELECT pgq.unsubscribe('orbit.changed', 'alerts') AS existed, pgq.unsubscribe('orbit.changed', 'alerts') AS again;
SELECT pgq.publish('orbit.changed', '{"sat": 1}') AS e2 \gset
SELECT q.name FROM pgq.jobs j JOIN pgq.queues q USING (queue_id)
 WHERE (j.payload->>'event_id')::bigint = :e2;

-- group_key (SPEC §9): every subscriber job joins that FIFO group of its
-- queue, so a relay keeps one event per key in flight, in order, across
-- retries; events of other keys pass.
SELECT pgq.create_queue('to_broker', max_attempts => 5);
SELECT pgq.subscribe('orbit.changed', 'to_broker');
SELECT pgq.publish('orbit.changed', jsonb_build_object('seq', i), group_key => 'sat-' || (i % 2))
  IS NOT NULL AS published FROM generate_series(1, 4) i;
SELECT j.group_key, j.state, j.payload->'payload'->>'seq' AS seq,
       j.payload->>'group_key' AS envelope_key
  FROM pgq.jobs j JOIN pgq.queues q USING (queue_id) WHERE q.name = 'to_broker' ORDER BY j.id;
-- One per key is claimable: seq 1 (sat-1) and seq 2 (sat-0).
SELECT c.payload->'payload'->>'seq' AS seq, j.group_key
  FROM pgq.claim('to_broker', 10) c JOIN pgq.jobs j USING (id) ORDER BY 1;
-- A retry keeps its place: the next of its key waits until it completes.
SELECT pgq.fail(id, attempt, 'broker away', retry_in => '0') FROM pgq.jobs
 WHERE group_key = 'sat-1' AND state = 'r';
SELECT payload->'payload'->>'seq' AS seq FROM pgq.claim('to_broker', 10) ORDER BY 1;
SELECT pgq.complete(id, attempt) FROM pgq.jobs WHERE group_key = 'sat-1' AND state = 'r';
SELECT payload->'payload'->>'seq' AS seq FROM pgq.claim('to_broker', 10) ORDER BY 1;
-- The other subscriber (passes) got its jobs in the same groups; alerts
-- unsubscribed before.
SELECT q.name, count(*) FILTER (WHERE j.group_key IS NOT NULL) AS grouped
  FROM pgq.jobs j JOIN pgq.queues q USING (queue_id)
 WHERE (j.payload->>'topic') = 'orbit.changed' GROUP BY q.name ORDER BY q.name;
SELECT pgq.unsubscribe('orbit.changed', 'to_broker');
SELECT pgq.drop_queue('to_broker', force => true);

-- Bad input.
SET pgq.max_payload_bytes = 100;
SELECT s AS statement, pg_temp.error_of(s) AS error FROM (VALUES
  ($$SELECT pgq.subscribe(NULL, 'passes')$$),
  ($$SELECT pgq.subscribe('', 'passes')$$),
  ($$SELECT pgq.subscribe('t', 'missing')$$),
  ($$SELECT pgq.subscribe('no.such.topic', 'passes')$$),
  ($$SELECT pgq.publish('no.such.topic', '{}')$$),
  ($$SELECT pgq.create_topic('orbit.changed')$$),
  ($$SELECT pgq.create_topic(NULL)$$),
  ($$SELECT pgq.grant_topic('postgres', 'orbit.changed', 'read')$$),
  ($$SELECT pgq.grant_topic('postgres', 'no.such.topic', 'publish')$$),
  ($$SELECT pgq.unsubscribe('t', 'missing')$$),
  ($$SELECT pgq.publish(NULL, '{}')$$),
  ($$SELECT pgq.publish('t', NULL)$$),
  ($$SELECT pgq.publish('t', '{}', '')$$),
  ($$SELECT pgq.publish('t', '{}', group_key => '')$$),
  ($$SELECT pgq.publish('t', '{}', group_key => repeat('k', 513))$$),
  ($$SELECT pgq.publish('t', jsonb_build_object('x', repeat('a', 200)))$$)
) AS t(s);
RESET pgq.max_payload_bytes;

-- Dropping a queue drops its subscriptions.
SELECT pgq.drop_queue('passes', force => true);
SELECT count(*) AS subscriptions_left FROM pgq.subscriptions;

DROP EXTENSION pgq_cpp;
