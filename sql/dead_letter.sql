-- Dead-letter: cancel, retry_dead by id and by queue.
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('hooks', max_attempts => 1);

-- cancel: a pending job goes to dead-letter with reason 'cancelled'.
SELECT pgq.enqueue('hooks', '{"n": 1}', priority => 3, dedupe_key => 'k1') AS j1 \gset
SELECT pgq.cancel(:j1) AS cancelled;
SELECT pgq.cancel(:j1) AS cancelled_twice;
SELECT id, queue, payload, attempts, reason, priority, max_attempts, dedupe_key FROM pgq.dead_jobs;
-- A running job is cancelled too (1.2): its claim is fenced at once, so
-- the worker's fail, complete, extend, progress and snooze find nothing.
SELECT pgq.enqueue('hooks', '{"n": 2}') AS j2 \gset
SELECT attempt FROM pgq.claim('hooks');
SELECT pgq.progress(:j2, 1, '{"done": 3}');
SELECT pgq.cancel(:j2) AS cancel_running;
SELECT pgq.fail(:j2, 1, 'HTTP 500') AS fail, pgq.complete(:j2, 1) AS complete,
       pgq.extend(:j2, 1, '1 minute') AS extend, pgq.progress(:j2, 1, '{}') AS progress,
       pgq.snooze(:j2, 1, '1 minute') AS snooze;
SELECT id, reason, attempts, last_error, progress FROM pgq.dead_jobs ORDER BY id;

-- retry_dead(id): back to pending with fresh attempts, same id and payload.
SELECT pgq.retry_dead(:j1) AS retried;
SELECT pgq.retry_dead(:j1) AS retried_twice;
SELECT id, state, attempt, priority, payload, dedupe_key FROM pgq.jobs WHERE id = :j1;
SELECT id, attempt FROM pgq.claim('hooks');

-- A dead job whose dedupe key is held again by a live job stays dead.
SELECT pgq.complete(:j1, 1);
SELECT pgq.enqueue('hooks', '{"n": 3}', dedupe_key => 'dup') AS j3 \gset
SELECT pgq.cancel(:j3);
SELECT pgq.enqueue('hooks', '{"n": 4}', dedupe_key => 'dup') AS j4 \gset
SELECT pgq.retry_dead(:j3) AS retried_while_key_held;
SELECT count(*) AS still_dead FROM pgq.dead_jobs WHERE id = :j3;

-- retry_dead(queue, max): oldest first, at most max.
SELECT pgq.cancel(:j4);
SELECT pgq.retry_dead('hooks', 1) AS retried_one;
SELECT id FROM pgq.jobs ORDER BY id;
SELECT pgq.retry_dead('hooks') AS retried_rest;
SELECT count(*) AS dead_left FROM pgq.dead_jobs;
SELECT pgq.retry_dead('no_such_queue');
SELECT pgq.retry_dead(424242) AS unknown_id;

DROP EXTENSION pgq_cpp;
