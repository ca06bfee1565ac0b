-- Paced producer of bench/streams.sh latency (Skytools PgQ): the payload
-- carries the clock at append (see stream_latency_append.sql).
SELECT pgq.insert_event('bench', 'ev', jsonb_build_object('t', extract(epoch FROM clock_timestamp()))::text);
