-- Used only when pgq.complete_many is broken in the installed build (run.sh
-- probes it): pgq_halving.sql, completing the previous batch with one
-- pgq.complete per job inside a single statement.
BEGIN;
SELECT count(*) FILTER (WHERE pgq.complete(c.id, c.att))
  FROM unnest(:ids::bigint[], :attempts::integer[]) AS c(id, att);
SELECT COALESCE(array_agg(id), '{}') AS ids, COALESCE(array_agg(attempt), '{}') AS attempts
  FROM pgq.claim('bench', :n) \gset
COMMIT;
