-- Deep drain consumer of the ring queue 'bench_ring', :batch jobs at a time
-- (bench/drain.sh's pgqr with BATCH=N; drain_pgq_batch.sql on another queue): claim up to :batch jobs, then complete them with
-- one complete_many, two autocommit statements; an empty claim completes nothing.
SELECT count(*) AS n,
       coalesce(array_agg(id), '{}')::text AS ids,
       coalesce(array_agg(attempt), '{}')::text AS attempts
  FROM pgq.claim('bench_ring', :batch) \gset
\if :n > 0
SELECT pgq.complete_many(:ids::bigint[], :attempts::int[]);
\endif
