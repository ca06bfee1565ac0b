-- pgq_cpp stream, one event per transaction (bench/streams.sh append1, and
-- the producers of drain and wal).
SELECT pgq.append('bench', '{"k":1}');
