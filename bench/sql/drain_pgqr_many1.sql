-- Deep drain consumer of the ring queue 'bench_ring' (bench/drain.sh's pgqr
-- with COMPLETE=many; drain_pgq_many1.sql on another
-- queue): claim one job, then complete it with complete_many of
-- one, two autocommit statements; an empty claim completes nothing.
SELECT coalesce(max(id), 0) AS id, coalesce(max(attempt), 0) AS attempt
  FROM pgq.claim('bench_ring', 1) \gset
\if :id > 0
SELECT pgq.complete_many(ARRAY[:id]::bigint[], ARRAY[:attempt]::int[]);
\endif
