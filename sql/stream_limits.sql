-- What one stream may cost the others (issue 30, M1; docs/streams.md,
-- "Limits"): consumers per stream (pgq.max_consumers_per_stream), the
-- unfinished events counted per consumer by pgq.metrics() and
-- pgq.stream_stats (pgq.monitoring_count_limit).
CREATE EXTENSION pgq_cpp;

-- error_of(sql): 'SQLSTATE: message / detail / hint' of the error the
-- statement raises.
CREATE FUNCTION pg_temp.error_of(sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  detail text;
  hint text;
BEGIN
  EXECUTE sql;
  RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
  RETURN SQLSTATE || ': ' || SQLERRM || ' / ' || detail || ' / ' || hint;
END
$$;

-- finish_all(stream, consumer): reads and finishes batches until none is
-- left; the events finished.
CREATE FUNCTION pg_temp.finish_all(stream text, consumer text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  batch bigint;
  total bigint := 0;
BEGIN
  LOOP
    SELECT min(batch_id) INTO batch FROM pgq.next_batch(stream, consumer);
    EXIT WHEN batch IS NULL;
    total := total + pgq.finish_batch(batch);
  END LOOP;
  RETURN total;
END
$$;

-- The stream lines of pgq.metrics() for one stream.
CREATE FUNCTION pg_temp.stream_metrics(stream text) RETURNS SETOF text
LANGUAGE sql AS $$
  SELECT regexp_replace(line, 'database="[^"]*",', '')
    FROM unnest(string_to_array(pgq.metrics(), E'\n')) AS line
   WHERE line ~ ('^pgq_stream_consumer_pending_events.*stream="' || stream || '"')
   ORDER BY 1
$$;

SHOW pgq.max_consumers_per_stream;
SHOW pgq.monitoring_count_limit;

------------------------------------------------------------------------------
-- Consumers per stream.

CREATE ROLE pgq_l_reader;
SELECT pgq.create_stream('orders');
SELECT pgq.create_stream('other');
SELECT pgq.grant_stream('pgq_l_reader', 'orders', 'consume');

-- The limit is a superuser's setting: a role that may register cannot
-- raise it for itself.
SET ROLE pgq_l_reader;
SELECT pg_temp.error_of($$SET pgq.max_consumers_per_stream = 1000$$);
RESET ROLE;

SET pgq.max_consumers_per_stream = 3;
SET ROLE pgq_l_reader;
SELECT i, pgq.register_consumer('orders', 'c' || i) AS registered FROM generate_series(1, 3) i;
-- A fourth is refused with 54000 and names the setting.
SELECT pg_temp.error_of($$SELECT pgq.register_consumer('orders', 'c4')$$);
-- Registering a consumer it has again is no error (and registers nothing).
SELECT pgq.register_consumer('orders', 'c1') AS registered_again;
-- Unregistering makes room.
SELECT pgq.unregister_consumer('orders', 'c3') AS unregistered;
SELECT pgq.register_consumer('orders', 'c4') AS registered;
SELECT pg_temp.error_of($$SELECT pgq.register_consumer('orders', 'c5')$$);
RESET ROLE;
-- The limit is per stream: another stream takes consumers of its own, and
-- a superuser is held to it as well.
SELECT pgq.register_consumer('other', 'o1') AS registered;
SELECT pg_temp.error_of($$SELECT pgq.register_consumer('orders', 'admin')$$);
-- Lowered below what a stream has: its consumers stay, new ones are refused.
SET pgq.max_consumers_per_stream = 1;
SELECT pg_temp.error_of($$SELECT pgq.register_consumer('other', 'o2')$$);
SELECT s.name AS stream, count(*) AS consumers
  FROM pgq.stream_consumers c JOIN pgq.streams s USING (stream_id)
 GROUP BY s.name ORDER BY s.name;
RESET pgq.max_consumers_per_stream;
SELECT pgq.register_consumer('other', 'o2') AS registered;

------------------------------------------------------------------------------
-- Unfinished events, counted up to pgq.monitoring_count_limit.

SELECT pgq.create_stream('deep');
SELECT pgq.register_consumer('deep', 'far') AS far, pgq.register_consumer('deep', 'near') AS near;
-- Twenty events in two transactions, then near reads them all; three more
-- near has not read.
SELECT count(*) AS appended FROM (SELECT pgq.append('deep', jsonb_build_object('k', i))
                                    FROM generate_series(1, 12) i) a;
SELECT count(*) AS appended FROM pgq.append_many('deep', ARRAY(
         SELECT jsonb_build_object('k', i) FROM generate_series(13, 20) i));
SELECT pg_temp.finish_all('deep', 'near') AS near_finished;
SELECT count(*) AS appended FROM pgq.append_many('deep', ARRAY(
         SELECT jsonb_build_object('k', i) FROM generate_series(21, 23) i));

-- Under the limit: exact.
SELECT consumer, pending_events, pending_capped FROM pgq.stream_stats
 WHERE stream = 'deep' ORDER BY consumer;

-- Over it: far, 23 behind, shows the limit and says it was cut there;
-- near is still exact. pgq.metrics() the same, in a family of its own.
SET pgq.monitoring_count_limit = 5;
SELECT consumer, pending_events, pending_capped, lag > interval '0' AS lagging
  FROM pgq.stream_stats WHERE stream = 'deep' ORDER BY consumer;
SELECT * FROM pg_temp.stream_metrics('deep');
SELECT line FROM unnest(string_to_array(pgq.metrics(), E'\n')) AS line
 WHERE line ~ '^# (HELP|TYPE) pgq_stream_consumer_pending_events' ORDER BY line;

-- Inside a window, with a batch open and then finished: the count moves
-- with the cursor.
SELECT count(*) AS in_batch FROM pgq.next_batch('deep', 'far', 4);
SET pgq.monitoring_count_limit = 1000;
SELECT consumer, pending_events, pending_capped, batch_open FROM pgq.stream_stats
 WHERE stream = 'deep' AND consumer = 'far';
SELECT pgq.finish_batch(max(batch_id)) AS finished FROM pgq.next_batch('deep', 'far');
SELECT count(*) AS in_batch FROM pgq.next_batch('deep', 'far', 4);
SELECT pgq.finish_batch(max(batch_id)) AS finished FROM pgq.next_batch('deep', 'far');
-- 15 left: exact at a limit of 15, cut at 14.
SET pgq.monitoring_count_limit = 15;
SELECT consumer, pending_events, pending_capped FROM pgq.stream_stats
 WHERE stream = 'deep' AND consumer = 'far';
SET pgq.monitoring_count_limit = 14;
SELECT consumer, pending_events, pending_capped FROM pgq.stream_stats
 WHERE stream = 'deep' AND consumer = 'far';
SELECT * FROM pg_temp.stream_metrics('deep');
-- The setting is a superuser's too.
SET ROLE pgq_l_reader;
SELECT pg_temp.error_of($$SET pgq.monitoring_count_limit = 1000000$$);
RESET ROLE;
RESET pgq.monitoring_count_limit;
SELECT pg_temp.finish_all('deep', 'far') AS far_finished;
SELECT consumer, pending_events, pending_capped FROM pgq.stream_stats
 WHERE stream = 'deep' ORDER BY consumer;

------------------------------------------------------------------------------
-- A batch ends after the event that takes its payloads (as stored) to
-- pgq.max_batch_bytes: next_batch holds about that much at most, whatever
-- max_events says.

SHOW pgq.max_batch_bytes;
SELECT pgq.create_stream('wide');
SELECT pgq.register_consumer('wide', 'w');
-- Seven events of one size.
SELECT count(*) AS appended FROM pgq.append_many('wide', ARRAY(
         SELECT jsonb_build_object('k', lpad(i::text, 2, '0'), 's', repeat('x', 40))
           FROM generate_series(1, 7) i));
SELECT DISTINCT pg_column_size(payload) AS event_bytes FROM pgq.stream_events
 WHERE stream_id = (SELECT stream_id FROM pgq.streams WHERE name = 'wide');
-- 150 bytes: the third event takes the batch past it, and is its last.
SET pgq.max_batch_bytes = 150;
SELECT batch_id & 4294967295 AS batch_no, payload->>'k' AS k
  FROM pgq.next_batch('wide', 'w', 1000);
-- The open batch again, the same events, whatever the setting is now.
RESET pgq.max_batch_bytes;
SELECT batch_id & 4294967295 AS batch_no, payload->>'k' AS k
  FROM pgq.next_batch('wide', 'w', 1000);
SET pgq.max_batch_bytes = 1;
SELECT batch_id & 4294967295 AS batch_no, payload->>'k' AS k
  FROM pgq.next_batch('wide', 'w', 1000);
SELECT pgq.finish_batch(max(batch_id)) AS finished FROM pgq.next_batch('wide', 'w');
-- Smaller than one event: a batch still has one.
SELECT batch_id & 4294967295 AS batch_no, payload->>'k' AS k
  FROM pgq.next_batch('wide', 'w', 1000);
SELECT pgq.finish_batch(max(batch_id)) AS finished FROM pgq.next_batch('wide', 'w');
-- The window's last three in one batch cut by size: it does not end the
-- window, the next call finds it empty and cuts a new one, which has the
-- event appended meanwhile.
SET pgq.max_batch_bytes = 150;
SELECT batch_id & 4294967295 AS batch_no, payload->>'k' AS k
  FROM pgq.next_batch('wide', 'w', 1000);
SELECT pgq.finish_batch(max(batch_id)) AS finished FROM pgq.next_batch('wide', 'w');
SELECT pgq.append('wide', jsonb_build_object('k', '08', 's', repeat('x', 40))) > 0 AS appended;
SELECT batch_id & 4294967295 AS batch_no, payload->>'k' AS k
  FROM pgq.next_batch('wide', 'w', 1000);
SELECT pgq.finish_batch(max(batch_id)) AS finished FROM pgq.next_batch('wide', 'w');
SELECT count(*) AS left_over FROM pgq.next_batch('wide', 'w', 1000);
-- max_events still cuts first when it comes first.
SELECT count(*) AS appended FROM pgq.append_many('wide', ARRAY(
         SELECT jsonb_build_object('k', lpad(i::text, 2, '0'), 's', repeat('x', 40))
           FROM generate_series(9, 11) i));
SELECT batch_id & 4294967295 AS batch_no, payload->>'k' AS k
  FROM pgq.next_batch('wide', 'w', 2);
SELECT pgq.finish_batch(max(batch_id)) AS finished FROM pgq.next_batch('wide', 'w');
SELECT batch_id & 4294967295 AS batch_no, payload->>'k' AS k
  FROM pgq.next_batch('wide', 'w', 2);
SELECT pgq.finish_batch(max(batch_id)) AS finished FROM pgq.next_batch('wide', 'w');
RESET pgq.max_batch_bytes;
-- A superuser's setting.
SET ROLE pgq_l_reader;
SELECT pg_temp.error_of($$SET pgq.max_batch_bytes = '1GB'$$);
RESET ROLE;

------------------------------------------------------------------------------
-- What one look at every consumer counts in all (3.0, issue 31, ADR 0023):
-- past 30 consumers each is counted up to the limit x 30 / their number, at
-- least 10, so a scrape's work does not grow as consumers x limit.
SET pgq.monitoring_count_limit = 20;
SELECT pgq.create_stream('crowd');
SELECT count(*) AS registered FROM generate_series(1, 30) i
 WHERE pgq.register_consumer('crowd', 'c' || lpad(i::text, 3, '0'));
SELECT count(*) AS appended FROM pgq.append_many('crowd', ARRAY(
         SELECT jsonb_build_object('k', i) FROM generate_series(1, 15) i));
-- 30 consumers seen: each counted up to the limit, 20: all 15 shown.
SELECT pending_events, pending_capped, count(*) FROM pgq.stream_stats
 WHERE stream = 'crowd' GROUP BY 1, 2;
SELECT count(*) AS registered FROM generate_series(31, 60) i
 WHERE pgq.register_consumer('crowd', 'c' || lpad(i::text, 3, '0'));
-- 60: each up to 20 x 30 / 60 = 10: the first thirty (15 behind) show 10,
-- capped; the others, registered after the appends, none.
SELECT pending_events, pending_capped, count(*) FROM pgq.stream_stats
 WHERE stream = 'crowd' GROUP BY 1, 2;
-- The scrape counts the same way.
SELECT count(*) FILTER (WHERE line ~ '^pgq_stream_consumer_pending_events\{.*stream="crowd".*\} 10$') AS ten,
       count(*) FILTER (WHERE line ~ '^pgq_stream_consumer_pending_events_capped\{.*stream="crowd".*\} 1$') AS capped
  FROM unnest(string_to_array(pgq.metrics(), E'\n')) AS line;
-- A limit of 15 over 60 consumers would be 7 each: never fewer than 10
-- (the limit itself when it is lower).
SET pgq.monitoring_count_limit = 15;
SELECT pending_events, pending_capped, count(*) FROM pgq.stream_stats
 WHERE stream = 'crowd' GROUP BY 1, 2;
SELECT pgq.drop_stream('crowd');
RESET pgq.monitoring_count_limit;

DROP EXTENSION pgq_cpp;
DROP ROLE pgq_l_reader;
