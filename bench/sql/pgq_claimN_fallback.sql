-- Used only when pgq.complete_many is broken in the installed build (run.sh
-- probes it): the same shape, completing the batch with one pgq.complete per
-- job inside a single statement.
SELECT array_agg(id) AS ids, array_agg(attempt) AS atts FROM pgq.claim('bench', :n) \gset
SELECT count(*) FILTER (WHERE pgq.complete(c.id, c.att))
  FROM unnest(:ids::bigint[], :atts::integer[]) AS c(id, att);
