-- Skytools PgQ (database skytools), one event per transaction
-- (bench/streams.sh append1, and the producers of drain).
SELECT pgq.insert_event('bench', 'ev', '{"k":1}');
