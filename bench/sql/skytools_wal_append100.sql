-- bench/streams.sh wal, Skytools PgQ, 100 events per transaction, then a
-- tick of those 100 (ticker_max_count = 100) in a transaction of its own.
SELECT count(pgq.insert_event('bench', 'ev', '{"k":1}')) FROM generate_series(1, 100);
SELECT pgq.ticker('bench');
