-- pgq_cpp stream consumer (bench/streams.sh read100/read1000, drain, size,
-- wal): the next batch of up to :batch events for consumer 'c', waiting up to
-- :wait_s seconds for some, then finish it: two autocommit statements. The
-- events are counted in the server, not shipped to the client (as the
-- Skytools and baseline consumers do); an empty batch finishes nothing.
SELECT count(*) AS got, coalesce(max(batch_id), 0) AS batch_id
  FROM pgq.next_batch('bench', 'c', :batch, make_interval(secs => :wait_s)) \gset
\if :batch_id > 0
SELECT pgq.finish_batch(:batch_id);
\endif
