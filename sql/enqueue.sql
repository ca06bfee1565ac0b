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

-- enqueue_many with keys (3.1): a key for every payload or one per
-- payload, NULL for none. A taken dedupe key answers with its holder's id
-- in its payload's place, an earlier payload of the same call included;
-- ids stay in input order.
SELECT pgq.create_queue('import', group_concurrency => 1);
SELECT pgq.enqueue('import', '{"seen": 0}', dedupe_key => 'row-0') AS held \gset
SELECT array_agg(id ORDER BY n) AS keyed_ids
  FROM pgq.enqueue_many('import',
                        ARRAY['{"r": 1}', '{"r": 2}', '{"r": 3}', '{"r": 4}', '{"r": 5}']::jsonb[],
                        group_keys => ARRAY['tenant-a', 'tenant-a', NULL, 'tenant-b', 'tenant-a'],
                        dedupe_keys => ARRAY['row-1', 'row-2', 'row-1', 'row-0', NULL])
       WITH ORDINALITY AS t(id, n) \gset
SELECT (:'keyed_ids'::bigint[])[3] = (:'keyed_ids'::bigint[])[1] AS duplicate_in_call_gets_first,
       (:'keyed_ids'::bigint[])[4] = :held AS held_key_gets_holder,
       cardinality(:'keyed_ids'::bigint[]) AS ids;
SELECT payload->>'r' AS r, group_key, dedupe_key, state
  FROM pgq.jobs WHERE queue_id = (SELECT queue_id FROM pgq.queues WHERE name = 'import')
 ORDER BY id;
-- One key for every payload: the group's first job is claimable, the others
-- wait behind it (group_concurrency 1).
SELECT count(*) AS in_group_c
  FROM pgq.enqueue_many('import', ARRAY['{"c": 1}', '{"c": 2}', '{"c": 3}']::jsonb[],
                        group_keys => ARRAY['tenant-c']);
SELECT group_key, count(*) FILTER (WHERE state = 'p') AS ready,
       count(*) FILTER (WHERE state = 'w') AS waiting
  FROM pgq.jobs WHERE group_key = 'tenant-c' GROUP BY group_key;
-- One dedupe key for every payload: one job, every id its.
SELECT count(DISTINCT id) AS one_job
  FROM pgq.enqueue_many('import', ARRAY['{"d": 1}', '{"d": 2}']::jsonb[], dedupe_keys => ARRAY['once']) AS id;

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
