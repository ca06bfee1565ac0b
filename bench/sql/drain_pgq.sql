-- Deep drain consumer (bench/drain.sh): claim one job, then complete it, two
-- autocommit statements; an empty claim (the producers are behind) completes
-- nothing.
SELECT coalesce(max(id), 0) AS id, coalesce(max(attempt), 0) AS attempt
  FROM pgq.claim('bench', 1) \gset
\if :id > 0
SELECT pgq.complete(:id, :attempt);
\endif
