-- Enqueue: ids, defaults, dedupe, enqueue_many order, the caller's transaction.
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('signup');

SELECT pgq.enqueue('signup', '{"user": 1}') AS first_id;
SELECT pgq.enqueue('signup', '{"user": 2}', priority => 10, max_attempts => 2) AS second_id;
SELECT pgq.enqueue('signup', '{"user": 3}', run_at => pgq.clock() + interval '1 hour') AS later_id;
SELECT id, state, priority, attempt, max_attempts, payload,
       run_at > now() AS scheduled, lease_until IS NULL AS no_lease
  FROM pgq.jobs ORDER BY id;

-- The job exists if and only if the caller's transaction commits.
BEGIN;
SELECT pgq.enqueue('signup', '{"user": 4}') IS NOT NULL AS enqueued;
ROLLBACK;
SELECT count(*) AS jobs_for_user_4 FROM pgq.jobs WHERE payload = '{"user": 4}';

-- dedupe_key: a pending or running job with the key wins; its id comes back.
SELECT pgq.enqueue('signup', '{"n": 1}', dedupe_key => 'welcome:ana') AS dedupe_first \gset
SELECT pgq.enqueue('signup', '{"n": 2}', dedupe_key => 'welcome:ana') = :dedupe_first AS same_job;
SELECT count(*) AS jobs_with_key, min(payload::text) AS kept_payload
  FROM pgq.jobs WHERE dedupe_key = 'welcome:ana';
-- Keys are per queue.
SELECT pgq.create_queue('other');
SELECT pgq.enqueue('other', '{"n": 3}', dedupe_key => 'welcome:ana') <> :dedupe_first AS new_job;
-- Once the holder is finished, the key is free again.
SELECT pgq.cancel(:dedupe_first);
SELECT pgq.enqueue('signup', '{"n": 4}', dedupe_key => 'welcome:ana') <> :dedupe_first AS fresh_job;

-- enqueue_many: ids in input order, one statement.
SELECT array_agg(id) AS many_ids
  FROM pgq.enqueue_many('signup', ARRAY['{"i": 1}', '{"i": 2}', '{"i": 3}']::jsonb[], priority => 5) AS id
\gset
SELECT j.payload, j.priority, j.id = (:'many_ids'::bigint[])[(j.payload->>'i')::int] AS id_matches_position
  FROM pgq.jobs j WHERE j.payload ? 'i' ORDER BY j.id;
SELECT count(*) AS empty_batch FROM pgq.enqueue_many('signup', '{}'::jsonb[]);

-- Large payloads are refused, with the limit in a setting.
SET pgq.max_payload_bytes = 64;
SELECT pgq.enqueue('signup', jsonb_build_object('blob', repeat('x', 100)));
SELECT * FROM pgq.enqueue_many('signup', ARRAY['{}', jsonb_build_object('blob', repeat('x', 100))]);
RESET pgq.max_payload_bytes;

-- A plain job is written without an INSERT statement (ADR 0014): a payload
-- stored out of line (TOAST) and one compressed in line come back whole,
-- every column has its value, and the claim finds the jobs in its index.
SELECT pgq.create_queue('big');
SELECT jsonb_build_object('blob', string_agg(md5(i::text), '')) AS big_payload
  FROM generate_series(1, 4000) AS i \gset
SELECT pgq.enqueue('big', :'big_payload') AS big_id \gset
SELECT pgq.enqueue('big', jsonb_build_object('blob', repeat('x', 100000)), priority => 1) AS packed_id \gset
SELECT state, priority, attempt, max_attempts, run_at = enqueued_at AS due_now,
       enqueued_at BETWEEN now() - interval '1 minute' AND now() AS enqueued_now,
       dedupe_key IS NULL AND group_key IS NULL AND last_error IS NULL
       AND lease_until IS NULL AS no_extras,
       pg_column_size(payload) < 8000 AS in_line
  FROM pgq.jobs WHERE queue_id = (SELECT queue_id FROM pgq.queues WHERE name = 'big') ORDER BY id;
SELECT id = :packed_id AS packed_first, md5(payload::text) = md5(:'big_payload'::jsonb::text)
       OR payload->>'blob' = repeat('x', 100000) AS payload_intact
  FROM pgq.claim('big', 2);

DROP EXTENSION pgq_cpp;
