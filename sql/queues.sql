-- Queues: create, alter, pause/resume, drop.
CREATE EXTENSION pgq_cpp;

SELECT pgq.create_queue('emails');
SELECT name, max_attempts, lease, backoff_base, backoff_max, retention, notify, paused
  FROM pgq.queues;

-- An existing name is duplicate_object unless if_not_exists.
SELECT pgq.create_queue('emails');
SELECT pgq.create_queue('emails', max_attempts => 9, if_not_exists => true);
SELECT max_attempts FROM pgq.queues WHERE name = 'emails';

SELECT pgq.create_queue('meta.whatsapp-out_v2', max_attempts => 3, lease => '30 seconds',
                        backoff_base => '2 seconds', backoff_max => '10 minutes',
                        retention => '7 days', notify => true);
SELECT name, max_attempts, lease, backoff_base, backoff_max, retention, notify
  FROM pgq.queues ORDER BY queue_id;

-- alter_queue: NULL means unchanged.
SELECT pgq.alter_queue('emails', max_attempts => 8, lease => '5 minutes');
SELECT name, max_attempts, lease, backoff_base, backoff_max FROM pgq.queues WHERE name = 'emails';
SELECT pgq.alter_queue('emails', backoff_max => '1 second', backoff_base => '2 seconds');
SELECT pgq.alter_queue('emails', backoff_base => '2 hours');
SELECT backoff_base, backoff_max FROM pgq.queues WHERE name = 'emails';
SELECT pgq.alter_queue('nope', max_attempts => 2);

-- pause/resume take an explicit value and return the stored flag.
SELECT pgq.pause('emails');
SELECT pgq.pause('emails');
SELECT pgq.enqueue('emails', '{"to": "ana@example.com"}');
SELECT count(*) AS claimed_while_paused FROM pgq.claim('emails');
SELECT queue, ready, paused FROM pgq.queue_stats WHERE queue = 'emails';
SELECT pgq.resume('emails');
SELECT pgq.resume('emails');
SELECT id, attempt FROM pgq.claim('emails');
SELECT pgq.pause('nope');

-- drop_queue refuses while the queue holds jobs, unless force.
SELECT pgq.drop_queue('emails');
SELECT pgq.drop_queue('emails', force => true);
SELECT count(*) AS jobs_left FROM pgq.jobs;
SELECT pgq.drop_queue('emails');
SELECT pgq.drop_queue('meta.whatsapp-out_v2');
SELECT count(*) AS queues_left FROM pgq.queues;

-- A backend remembers queue ids and defaults between calls; changes and a
-- drop followed by a create under the same name are seen at once.
SELECT pgq.create_queue('cached', max_attempts => 2);
SELECT pgq.enqueue('cached', '{}') AS job \gset
SELECT max_attempts FROM pgq.jobs WHERE id = :job;
SELECT pgq.alter_queue('cached', max_attempts => 7);
SELECT pgq.enqueue('cached', '{}') AS job \gset
SELECT max_attempts FROM pgq.jobs WHERE id = :job;
SELECT queue_id AS old_id FROM pgq.queues WHERE name = 'cached' \gset
SELECT pgq.drop_queue('cached', force => true);
SELECT pgq.enqueue('cached', '{}');
SELECT pgq.create_queue('cached', max_attempts => 4);
SELECT pgq.enqueue('cached', '{}') AS job \gset
SELECT j.queue_id <> :old_id AS new_queue, j.queue_id = q.queue_id AS in_live_queue, j.max_attempts
  FROM pgq.jobs j JOIN pgq.queues q ON q.name = 'cached'
 WHERE j.id = :job;
SELECT pgq.drop_queue('cached', force => true);

-- A rate limit is stored as given; alter_queue(rate_limit => 0) removes it.
-- (Handlers: sql/handlers.sql; rate limits at work: test/python/test_flow.py.)
SELECT pgq.create_queue('limited', rate_limit => 2.5);
SELECT rate_limit FROM pgq.queues WHERE name = 'limited';
SELECT pgq.alter_queue('limited', max_attempts => 3);
SELECT rate_limit FROM pgq.queues WHERE name = 'limited';
SELECT pgq.alter_queue('limited', rate_limit => 0);
SELECT rate_limit IS NULL AS no_limit FROM pgq.queues WHERE name = 'limited';
-- One claim per 100 s: the bucket holds one token (at least one), full at first.
SELECT pgq.alter_queue('limited', rate_limit => 0.01);
SELECT count(*) AS enqueued FROM pgq.enqueue_many('limited', ARRAY['{}', '{}', '{}', '{}']::jsonb[]);
SELECT count(*) AS first_claim FROM pgq.claim('limited', 4);
SELECT count(*) AS no_token_left FROM pgq.claim('limited', 4);
SELECT pgq.alter_queue('limited', rate_limit => 0);
SELECT count(*) AS unlimited_again FROM pgq.claim('limited', 4);
SELECT pgq.drop_queue('limited', force => true);

DROP EXTENSION pgq_cpp;
