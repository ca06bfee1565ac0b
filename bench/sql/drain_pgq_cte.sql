-- Deep drain consumer (bench/drain_many.sh, mode cte): the shape of a batch
-- worker, the relay and the clients: the claim of :batch jobs wrapped in a
-- CTE that aggregates their ids, attempts and payloads (what a worker hands
-- its handler), then one complete_many, two autocommit statements; an empty
-- claim completes nothing.
WITH c AS (SELECT id, attempt, payload FROM pgq.claim('bench', :batch))
SELECT count(*) AS n,
       coalesce(array_agg(c.id ORDER BY c.id), '{}')::text AS ids,
       coalesce(array_agg(c.attempt ORDER BY c.id), '{}')::text AS attempts,
       coalesce(jsonb_agg(c.payload ORDER BY c.id), '[]') AS payloads
  FROM c \gset
\if :n > 0
SELECT pgq.complete_many(:ids::bigint[], :attempts::int[]);
\endif
