-- Deep drain consumer for the hand-written queue (bench/drain.sh): the claim
-- of bench/sql/base_claim1.sql with LIMIT :batch (drain.sh's BATCH, 1 by
-- default), then the delete of what it claimed (an IN (subquery LIMIT n) may
-- claim more than n rows when the planner rescans the subquery; every
-- claimed row is completed); an empty claim deletes nothing.
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
