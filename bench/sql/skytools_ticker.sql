-- The ticker in place of pgqd (bench/streams.sh): pgq.ticker() ticks every
-- queue that needs a tick (ticker_max_count new events, or ticker_max_lag
-- passed), then sleep :period_ms ms. pgqd's default ticker_period is 1 s.
SELECT pgq.ticker();
\sleep :period_ms ms
