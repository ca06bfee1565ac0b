-- Concurrency caps (issue 18): max_running across all workers,
-- group_concurrency per FIFO group; and claims across several queues.
CREATE EXTENSION pgq_cpp;

-- max_running: a claim takes no more than leaves the cap's count running.
SELECT pgq.create_queue('sms', max_running => 2);
SELECT max_running, group_concurrency FROM pgq.queues WHERE name = 'sms';
SELECT pgq.enqueue('sms', jsonb_build_object('n', i)) FROM generate_series(1, 7) i;
SELECT count(*) AS first_claim FROM pgq.claim('sms', 5);
SELECT count(*) AS at_the_cap FROM pgq.claim('sms', 5);
-- Each way out of running makes room: complete, fail (retry), release, snooze, cancel.
SELECT pgq.complete(id, attempt) FROM pgq.jobs WHERE state = 'r' ORDER BY id LIMIT 1;
SELECT count(*) AS after_complete FROM pgq.claim('sms', 5);
SELECT pgq.fail(id, attempt, 'busy', retry_in => '1 hour') FROM pgq.jobs WHERE state = 'r' ORDER BY id LIMIT 1;
SELECT count(*) AS after_fail FROM pgq.claim('sms', 5);
SELECT pgq.release(id, attempt) FROM pgq.jobs WHERE state = 'r' ORDER BY id LIMIT 1;
SELECT count(*) AS after_release FROM pgq.claim('sms', 5);
SELECT pgq.snooze(id, attempt, '1 hour') FROM pgq.jobs WHERE state = 'r' ORDER BY id LIMIT 1;
SELECT count(*) AS after_snooze FROM pgq.claim('sms', 5);
SELECT pgq.cancel(id) FROM pgq.jobs WHERE state = 'r' ORDER BY id LIMIT 1;
SELECT count(*) AS after_cancel FROM pgq.claim('sms', 5);
SELECT count(*) AS running FROM pgq.jobs WHERE state = 'r';
-- A wait on a queue at its cap ends empty (nothing frees a place).
SELECT count(*) AS pending_left FROM pgq.jobs WHERE state = 'p' AND run_at <= now();
SELECT count(*) AS waited FROM pgq.claim('sms', 1, wait => '50 ms');
-- Raised, the cap lets more run; removed (0), there is none.
SELECT pgq.alter_queue('sms', max_running => 3);
SELECT count(*) AS raised FROM pgq.claim('sms', 5);
SELECT pgq.alter_queue('sms', max_running => 0);
SELECT max_running IS NULL AS no_cap FROM pgq.queues WHERE name = 'sms';
SELECT pgq.enqueue('sms', '{}') FROM generate_series(1, 4);
SELECT count(*) AS uncapped FROM pgq.claim('sms', 10);
-- alter_queue without the cap arguments leaves them as they are.
SELECT pgq.alter_queue('sms', max_running => 4, group_concurrency => 3);
SELECT pgq.alter_queue('sms', max_attempts => 7);
SELECT max_running, group_concurrency, max_attempts FROM pgq.queues WHERE name = 'sms';

-- group_concurrency 2: the first two jobs of a group are pending or
-- running, the rest wait; each that leaves lets the next in, in enqueue order.
SELECT pgq.create_queue('crm', group_concurrency => 2);
SELECT pgq.enqueue('crm', jsonb_build_object('m', 'ann-' || i), group_key => 'ann')
  FROM generate_series(1, 5) i;
SELECT pgq.enqueue('crm', '{"m": "bob-1"}', group_key => 'bob');
SELECT payload->>'m' AS m, state FROM pgq.jobs j JOIN pgq.queues q USING (queue_id)
 WHERE q.name = 'crm' ORDER BY id;
SELECT payload->>'m' AS m FROM pgq.claim('crm', 10) ORDER BY id;
SELECT pgq.complete(id, attempt) FROM pgq.jobs WHERE payload->>'m' = 'ann-2';
SELECT payload->>'m' AS m, state FROM pgq.jobs WHERE group_key = 'ann' ORDER BY id;
SELECT pgq.cancel(id) FROM pgq.jobs WHERE payload->>'m' = 'ann-1';
SELECT payload->>'m' AS m, state FROM pgq.jobs WHERE group_key = 'ann' ORDER BY id;
-- Lowered to 1, a group lets nothing more in until it is down to one.
SELECT pgq.alter_queue('crm', group_concurrency => 1);
SELECT pgq.complete(id, attempt) FROM pgq.claim('crm', 10) WHERE payload->>'m' = 'ann-3';
SELECT payload->>'m' AS m, state FROM pgq.jobs WHERE group_key = 'ann' ORDER BY id;

-- Claims across queues: by priority, then run_at, then id, across them;
-- each queue's cap and lease apply; a queue at its cap leaves its share to
-- the others.
SELECT pgq.create_queue('low', lease => '1 minute');
SELECT pgq.create_queue('high', lease => '5 minutes');
SELECT pgq.create_queue('capped', max_running => 1);
SELECT pgq.enqueue('low', jsonb_build_object('q', 'low', 'n', i), priority => 0) FROM generate_series(1, 3) i;
SELECT pgq.enqueue('high', jsonb_build_object('q', 'high', 'n', i), priority => 5) FROM generate_series(1, 2) i;
SELECT pgq.enqueue('capped', jsonb_build_object('q', 'capped', 'n', i), priority => 9) FROM generate_series(1, 2) i;
SELECT queue, payload->>'n' AS n, priority,
       lease_until - pgq.clock() > interval '2 minutes' AS long_lease
  FROM pgq.claim(ARRAY['low', 'high', 'capped'], 4);
SELECT queue, payload->>'n' AS n FROM pgq.claim(ARRAY['low', 'high', 'capped'], 10);
SELECT count(*) AS none_left FROM pgq.claim(ARRAY['low', 'high', 'capped'], 10);
-- A paused queue is left out; a claim with wait across queues ends when one
-- of them has a job (here: none).
SELECT pgq.enqueue('low', '{"q": "low", "n": 4}');
SELECT pgq.pause('low');
SELECT count(*) AS paused_left_out FROM pgq.claim(ARRAY['low', 'high'], 10, wait => '20 ms');
SELECT pgq.resume('low');
SELECT queue FROM pgq.claim(ARRAY['high', 'low']);

-- Rights are checked on every queue named: consume on one is not enough.
CREATE ROLE caps_worker;
SELECT pgq.grant('caps_worker', 'low', 'consume');
SET ROLE caps_worker;
SELECT count(*) FROM pgq.claim(ARRAY['low']);
\set VERBOSITY terse
SELECT count(*) FROM pgq.claim(ARRAY['low', 'high']);
RESET ROLE;

-- Bad input: clear errors, nothing written.
SELECT pgq.create_queue('bad', max_running => 0);
SELECT pgq.create_queue('bad', max_running => -1);
SELECT pgq.create_queue('bad', max_running => 100001);
SELECT pgq.create_queue('bad', group_concurrency => 0);
SELECT pgq.create_queue('bad', group_concurrency => NULL);
SELECT pgq.create_queue('bad', group_concurrency => 10001);
SELECT pgq.alter_queue('sms', max_running => -1);
SELECT pgq.alter_queue('sms', group_concurrency => 0);
SELECT count(*) AS no_bad_queue FROM pgq.queues WHERE name = 'bad';
SELECT * FROM pgq.claim(ARRAY['low', 'low']);
SELECT * FROM pgq.claim(ARRAY[]::text[]);
SELECT * FROM pgq.claim(NULL::text[]);
SELECT * FROM pgq.claim(ARRAY['low', NULL]);
SELECT * FROM pgq.claim(ARRAY['low', 'nope']);
SELECT * FROM pgq.claim(ARRAY['low', 'Bad Name']);
SELECT * FROM pgq.claim(ARRAY[ARRAY['low'], ARRAY['high']]);
SELECT * FROM pgq.claim(array_fill('low'::text, ARRAY[33]));
SELECT * FROM pgq.claim(ARRAY['low', 'high'], 0);
DROP ROLE caps_worker;
DROP EXTENSION pgq_cpp;
