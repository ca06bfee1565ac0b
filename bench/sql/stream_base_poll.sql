-- The plain-SQL baseline's consumer in bench/streams.sh size: claim up to
-- 100 jobs and delete them (drain_base.sql with LIMIT 100); when there is
-- none, sleep :idle_ms ms instead of spinning (the producer is paced).
WITH c AS (
  UPDATE bench_jobs
     SET status = 'running', attempts = attempts + 1, lease_until = now() + interval '2 min'
   WHERE id IN (SELECT id FROM bench_jobs
                 WHERE queue = 'bench' AND status = 'pending' AND run_at <= now()
                 ORDER BY priority DESC, run_at, id
                 LIMIT 100
                 FOR UPDATE SKIP LOCKED)
  RETURNING id)
SELECT count(*) AS got, coalesce(string_agg(id::text, ','), '') AS ids FROM c \gset
\if :got > 0
DELETE FROM bench_jobs WHERE id = ANY (string_to_array(:ids, ',')::bigint[]);
\else
\sleep :idle_ms ms
\endif
