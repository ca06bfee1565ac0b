-- Skytools PgQ, 100 events per transaction: one statement calling
-- pgq.insert_event 100 times (PgQ has no batch insert; this is its cheapest
-- batch: one round trip, one commit). bench/streams.sh append100.
SELECT count(pgq.insert_event('bench', 'ev', '{"k":1}')) FROM generate_series(1, 100);
