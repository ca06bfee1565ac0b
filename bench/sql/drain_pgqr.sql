-- Deep drain consumer of the ring queue 'bench_ring' (bench/drain.sh's pgqr;
-- drain_pgq.sql on another queue): claim one job,
-- then complete it, two autocommit statements; an empty claim completes nothing.
SELECT coalesce(max(id), 0) AS id, coalesce(max(attempt), 0) AS attempt
  FROM pgq.claim('bench_ring', 1) \gset
\if :id > 0
SELECT pgq.complete(:id, :attempt);
\endif
