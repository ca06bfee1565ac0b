-- Paced producer of bench/streams.sh latency (pgq_cpp stream): the payload
-- carries the clock at append; bench/stream_latency.py subtracts it from its
-- own clock when next_batch returns the event.
SELECT pgq.append('bench', jsonb_build_object('t', extract(epoch FROM clock_timestamp())));
