-- Skytools PgQ consumer (bench/streams.sh read100/read1000, drain, size,
-- wal): next_batch, get_batch_events, finish_batch, three autocommit
-- statements, as pgq.Consumer does them. A batch is every event between two
-- ticks. The events are counted in the server, not shipped to the client.
-- No batch (no new tick): sleep :idle_ms ms.
SELECT coalesce(pgq.next_batch('bench', 'c'), 0) AS batch_id \gset
\if :batch_id > 0
SELECT count(*) AS got FROM pgq.get_batch_events(:batch_id) \gset
SELECT pgq.finish_batch(:batch_id);
\else
\sleep :idle_ms ms
\endif
