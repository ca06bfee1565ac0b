-- pgq_cpp stream, 100 events per transaction in one pgq.append_many
-- (bench/streams.sh append100 and wal).
SELECT count(*) FROM pgq.append_many('bench', array_fill('{"k":1}'::jsonb, ARRAY[100]));
