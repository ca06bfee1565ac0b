-- Deep drain consumer for the hand-written queue, :batch jobs at a time
-- (bench/drain.sh BATCH=N): the claim of bench/sql/drain_base.sql with LIMIT
-- :batch, then one delete of what it claimed; an empty claim deletes nothing.
WITH c AS (
  UPDATE bench_jobs
     SET status = 'running', attempts = attempts + 1, lease_until = now() + interval '2 min'
   WHERE id IN (SELECT id FROM bench_jobs
                 WHERE queue = 'bench' AND status = 'pending' AND run_at <= now()
                 ORDER BY priority DESC, run_at, id
                 LIMIT :batch
                 FOR UPDATE SKIP LOCKED)
  RETURNING id)
SELECT count(*) AS n, coalesce(string_agg(id::text, ','), '') AS ids FROM c \gset
\if :n > 0
DELETE FROM bench_jobs WHERE id = ANY (string_to_array(:ids, ',')::bigint[]);
\endif
