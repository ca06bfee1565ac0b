-- Deep drain consumer for pgmq (bench/drain.sh with PGMQ_SQL): read up to
-- :batch messages with a 120 s visibility timeout, then delete them, two
-- autocommit statements; an empty read deletes nothing.
SELECT count(*) AS n, coalesce(array_agg(msg_id), '{}')::text AS ids
  FROM pgmq.read('bench', 120, :batch) \gset
\if :n > 0
SELECT count(*) FROM pgmq.delete('bench', :ids::bigint[]);
\endif
