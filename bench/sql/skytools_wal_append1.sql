-- bench/streams.sh wal, Skytools PgQ, one event per transaction, with the
-- ticker's share: after every 100th event (per-client counter :i, start it
-- with -D i=0) pgq.ticker('bench') makes a tick (ticker_max_count = 100), as
-- a ticker would, so the consume phase reads batches of 100.
SELECT pgq.insert_event('bench', 'ev', '{"k":1}');
\set i :i + 1
\if :i % 100 = 0
SELECT pgq.ticker('bench');
\endif
