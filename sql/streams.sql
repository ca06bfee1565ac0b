-- Streams (issue 21): rings of segment tables read by registered consumers
-- in batches (docs/streams.md, ADR 0020). Every id printed here is
-- deterministic: the extension is created fresh below, and stream ids,
-- consumer ids, batch numbers and event ids all start at 1 with it
-- (a batch id is consumer_id * 2^32 + batch number). A create_stream or
-- register_consumer that finds the name taken spends an id, a rolled-back
-- append spends an event id.
CREATE EXTENSION pgq_cpp;

-- error_of(sql): 'SQLSTATE: message' of the error the statement raises.
CREATE FUNCTION pg_temp.error_of(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE sql;
  RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;

-- batch(consumer_id, batch_no): the batch id next_batch gives.
CREATE FUNCTION pg_temp.batch(consumer_id int, batch_no int) RETURNS bigint
LANGUAGE sql AS 'SELECT consumer_id::bigint << 32 | batch_no';

-- take(stream, consumer, max_events): reads the consumer's next batch,
-- finishes it, and says which batch it was and its events' "k" in order.
CREATE FUNCTION pg_temp.take(stream text, consumer text, max_events int DEFAULT 1000,
                             OUT batch_no bigint, OUT keys text, OUT finished int)
LANGUAGE plpgsql AS $$
DECLARE
  batch bigint;
BEGIN
  SELECT min(b.batch_id), string_agg(b.payload->>'k', ',' ORDER BY b.ord)
    INTO batch, keys
    FROM pgq.next_batch(stream, consumer, max_events) WITH ORDINALITY AS b(batch_id, event_id, payload, appended_at, ord);
  batch_no := batch & 4294967295;
  IF batch IS NOT NULL THEN
    finished := pgq.finish_batch(batch);
  END IF;
END
$$;

-- Consumers' statistics without the columns that depend on the clock.
CREATE TEMP VIEW stats AS
SELECT stream, consumer, lag > interval '0' AS lagging, pending_events, batch_open,
       batch_age IS NOT NULL AS has_batch_age, finished_events,
       last_finished_at IS NOT NULL AS has_finished
  FROM pgq.stream_stats ORDER BY stream, consumer;

------------------------------------------------------------------------------
-- Creating, altering and dropping streams.

SELECT pgq.create_stream('orders');
SELECT pgq.create_stream('audit', rotation => '1 minute');
-- (registered before anything is appended: it reads every event)
SELECT pgq.register_consumer('orders', 'billing') AS registered,
       pgq.register_consumer('orders', 'billing') AS registered_again;
SELECT stream_id, name, rotation, owner = current_user::regrole AS owned_by_me
  FROM pgq.streams ORDER BY stream_id;

-- Each stream is a ring of three segment tables under pgq.stream_events,
-- segment 0 taking the rows at first.
SELECT c.oid::regclass AS tbl, p.inhparent::regclass AS parent, c.relkind
  FROM pg_class c LEFT JOIN pg_inherits p ON p.inhrelid = c.oid
 WHERE c.relnamespace = 'pgq'::regnamespace AND c.relname LIKE 'stream\_events%'
   AND c.relkind IN ('r', 'p')
 ORDER BY c.relname;
SELECT r.ring_id, r.segments, r.current, r.generation
  FROM pgq.rings r ORDER BY ring_id;
SELECT ring_id, segment, empty, opened_at IS NOT NULL AS opened,
       sealed_at IS NOT NULL AS sealed, truncated_at IS NOT NULL AS truncated
  FROM pgq.ring_segments ORDER BY ring_id, segment;

-- A second create of a name fails, unless asked not to (and then changes
-- nothing).
SELECT pg_temp.error_of($$SELECT pgq.create_stream('orders')$$);
SELECT pgq.create_stream('orders', rotation => '5 minutes', if_not_exists => true);
SELECT name, rotation FROM pgq.streams WHERE name = 'orders';

SELECT pgq.alter_stream('audit', rotation => '30 seconds');
SELECT name, rotation FROM pgq.streams WHERE name = 'audit';

-- drop_stream says whether there was one, and takes its ledger rows; its
-- tables go at the maintenance's next pass (pgq.rings_dropped lists them
-- meanwhile: a partition's DROP would lock pgq.stream_events exclusively
-- until the dropping transaction ends).
SELECT pgq.register_consumer('audit', 'reader');
SELECT pgq.append('audit', '{"k": "gone"}') AS audit_event \gset
SELECT pgq.drop_stream('audit') AS dropped,
       pgq.drop_stream('audit', if_exists => true) AS dropped_again;
SELECT pg_temp.error_of($$SELECT pgq.drop_stream('audit')$$);
SELECT name FROM pgq.streams ORDER BY name;
SELECT count(*) AS audit_tables FROM pg_class
 WHERE relnamespace = 'pgq'::regnamespace AND relname LIKE 'stream\_events\_2%';
SELECT count(*) AS audit_ledger_rows FROM pgq.ring_segments WHERE ring_id = 2;
SELECT count(*) AS audit_consumers FROM pgq.stream_consumers WHERE stream_id = 2;
SELECT root, ring_id FROM pgq.rings_dropped;
SELECT count(*) AS maintained FROM pgq.maintain();
SELECT count(*) AS audit_tables_after_pass FROM pg_class
 WHERE relnamespace = 'pgq'::regnamespace AND relname LIKE 'stream\_events\_2%';
SELECT count(*) AS still_listed FROM pgq.rings_dropped;
SELECT count(*) AS events_left FROM pgq.stream_events;

------------------------------------------------------------------------------
-- Appending: ids increase, append_many returns them in input order.

SELECT pgq.append('orders', '{"k": "o1"}') AS id;
SELECT n, id FROM pgq.append_many('orders', ARRAY['{"k": "o2"}', '{"k": "o3"}', '{"k": "o4"}']::jsonb[])
       WITH ORDINALITY AS t(id, n);
SELECT count(*) AS appended FROM pgq.append_many('orders', '{}'::jsonb[]);
SELECT id, segment, payload FROM pgq.stream_events WHERE stream_id = 1 ORDER BY id;

------------------------------------------------------------------------------
-- Batches: the open batch comes back until it is finished.

SELECT batch_id >> 32 AS consumer_id, batch_id & 4294967295 AS batch_no, event_id, payload
  FROM pgq.next_batch('orders', 'billing', 3);
-- Again: the same batch with the same events (max_events does not matter
-- for an open batch).
SELECT batch_id, event_id, payload FROM pgq.next_batch('orders', 'billing', 1);
SELECT batch_id, event_id, payload FROM pgq.next_batch('orders', 'billing');
SELECT * FROM stats;
SELECT pgq.finish_batch(pg_temp.batch(1, 1)) AS finished;
SELECT * FROM stats;
-- Finishing twice is refused and changes nothing.
SELECT pg_temp.error_of($$SELECT pgq.finish_batch(pg_temp.batch(1, 1))$$);
SELECT batch_id, event_id, payload FROM pgq.next_batch('orders', 'billing', 3);
-- A batch not given yet cannot be finished.
SELECT pg_temp.error_of($$SELECT pgq.finish_batch(pg_temp.batch(1, 3))$$);
SELECT pgq.finish_batch(pg_temp.batch(1, 2)) AS finished;
SELECT batch_id, event_id, payload FROM pgq.next_batch('orders', 'billing');
SELECT * FROM stats;

-- Events appended after finishing come in the next batch, and only they.
SELECT pgq.append('orders', '{"k": "o5"}') AS id;
SELECT batch_id, event_id, payload FROM pgq.next_batch('orders', 'billing');
SELECT pgq.finish_batch(pg_temp.batch(1, 3)) AS finished;

-- A rolled-back append is never read (its id is spent).
BEGIN;
SELECT pgq.append('orders', '{"k": "rolled back"}') AS id;
ROLLBACK;
SELECT batch_id, event_id, payload FROM pgq.next_batch('orders', 'billing');
-- Waiting finds nothing and returns nothing.
SELECT batch_id, event_id, payload FROM pgq.next_batch('orders', 'billing', wait => '0.2 seconds');

-- Two transactions: their events in commit order, each transaction's in
-- append order; one batch has them all.
BEGIN;
SELECT pgq.append('orders', '{"k": "t1.a"}') AS id;
SELECT pgq.append('orders', '{"k": "t1.b"}') AS id;
COMMIT;
SELECT * FROM pgq.append_many('orders', ARRAY['{"k": "t2.a"}', '{"k": "t2.b"}']::jsonb[]);
-- (an event there: wait returns at once)
SELECT batch_id, event_id, payload FROM pgq.next_batch('orders', 'billing', wait => '1 minute');
SELECT pgq.finish_batch(pg_temp.batch(1, 4)) AS finished;

------------------------------------------------------------------------------
-- Two consumers: each reads every event, independently of the other. A
-- consumer registered later reads only what is committed after it.

SELECT pgq.register_consumer('orders', 'search');
SELECT batch_id, event_id, payload FROM pgq.next_batch('orders', 'search');
SELECT * FROM stats;
SELECT * FROM pgq.append_many('orders', ARRAY['{"k": "o6"}', '{"k": "o7"}', '{"k": "o8"}']::jsonb[]);
SELECT * FROM stats;
SELECT batch_id, event_id, payload FROM pgq.next_batch('orders', 'billing', 2);
SELECT batch_id, event_id, payload FROM pgq.next_batch('orders', 'search');
SELECT pgq.finish_batch(pg_temp.batch(4, 1)) AS search_finished;
SELECT * FROM stats;
SELECT pgq.finish_batch(pg_temp.batch(1, 5)) AS billing_finished;
SELECT * FROM pg_temp.take('orders', 'billing');
SELECT * FROM pg_temp.take('orders', 'search');
SELECT * FROM pg_temp.take('orders', 'billing');
SELECT * FROM stats;

-- Unregistering forgets the consumer; registered again, it is a new one
-- (new id, new batches) that reads only what comes after.
SELECT pgq.unregister_consumer('orders', 'search') AS unregistered,
       pgq.unregister_consumer('orders', 'search') AS unregistered_again;
SELECT pg_temp.error_of($$SELECT pgq.next_batch('orders', 'search')$$);
SELECT pg_temp.error_of($$SELECT pgq.finish_batch(pg_temp.batch(4, 2))$$);
SELECT pgq.register_consumer('orders', 'search');
SELECT pgq.append('orders', '{"k": "o9"}') AS id;
SELECT batch_id >> 32 AS consumer_id, batch_id & 4294967295 AS batch_no, payload
  FROM pgq.next_batch('orders', 'search');
SELECT pgq.finish_batch(pg_temp.batch(5, 1)) AS finished;
SELECT * FROM pg_temp.take('orders', 'billing');
SELECT consumer_id, name, finished_batches, finished_events
  FROM pgq.stream_consumers ORDER BY consumer_id;

-- A window read in batches of max_events: the cursor moves through it.
SELECT * FROM pgq.append_many('orders', ARRAY['{"k": "w1"}', '{"k": "w2"}', '{"k": "w3"}', '{"k": "w4"}']::jsonb[]);
SELECT * FROM pg_temp.take('orders', 'billing', 2);
SELECT * FROM pg_temp.take('orders', 'billing', 2);
SELECT * FROM pg_temp.take('orders', 'billing', 2);
SELECT * FROM pg_temp.take('orders', 'search', 3);
SELECT * FROM pg_temp.take('orders', 'search', 3);
SELECT * FROM pg_temp.take('orders', 'search', 3);
SELECT * FROM stats;

------------------------------------------------------------------------------
-- Rotation and truncation (pgq.maintain(); no worker runs in these tests).
-- The ring turns when its current segment is `rotation` old and the next
-- one is empty; a sealed segment is truncated once every consumer finished
-- it; the current one never is. A rotation is made due below by setting
-- it to 1 second and sleeping just over it, then set back to an hour so that
-- no other pass turns the ring.

SELECT pgq.create_stream('ring', rotation => '1 hour');
SELECT pgq.register_consumer('ring', 'fast'), pgq.register_consumer('ring', 'slow');
CREATE TEMP VIEW ring_ledger AS
SELECT g.segment, g.segment = r.current AS current, g.empty, g.sealed_at IS NOT NULL AS sealed,
       g.truncated_at IS NOT NULL AS truncated, r.generation AS rotations
  FROM pgq.rings r JOIN pgq.ring_segments g USING (ring_id)
  JOIN pgq.streams s ON s.stream_id = r.ring_id
 WHERE s.name = 'ring' ORDER BY g.segment;
CREATE TEMP VIEW ring_rows AS
SELECT tableoid::regclass AS segment_table, count(*) AS events,
       string_agg(payload->>'k', ',' ORDER BY id) AS keys
  FROM pgq.stream_events
 WHERE stream_id = (SELECT stream_id FROM pgq.streams WHERE name = 'ring')
 GROUP BY 1 ORDER BY 1::text;
CREATE FUNCTION pg_temp.turn() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pgq.alter_stream('ring', rotation => '1 second');
  PERFORM pg_sleep(1.1);
  PERFORM pgq.maintain();
  PERFORM pgq.alter_stream('ring', rotation => '1 hour');
END
$$;

SELECT * FROM pgq.append_many('ring', ARRAY['{"k": "a1"}', '{"k": "a2"}']::jsonb[]);
SELECT * FROM pg_temp.take('ring', 'fast');
SELECT * FROM pg_temp.take('ring', 'slow');
-- Everything is finished, but segment 0 is current: it is kept.
SELECT expired_requeued FROM pgq.maintain();
SELECT * FROM ring_ledger;
SELECT * FROM ring_rows;

-- The ring turns: segment 1 takes new rows, segment 0 is sealed...
SELECT pg_temp.turn();
SELECT * FROM ring_ledger;
SELECT pgq.append('ring', '{"k": "b1"}') AS id;
SELECT * FROM ring_rows;
-- ... and truncated by the next pass, as both consumers finished it.
SELECT expired_requeued FROM pgq.maintain();
SELECT * FROM ring_ledger;
SELECT * FROM ring_rows;

-- "slow" does not finish segment 1: sealed, it is kept.
SELECT * FROM pg_temp.take('ring', 'fast');
SELECT pg_temp.turn();
SELECT pgq.append('ring', '{"k": "c1"}') AS id;
SELECT expired_requeued FROM pgq.maintain();
SELECT * FROM ring_ledger;
SELECT * FROM ring_rows;
-- The ring turns onto the empty segment 0, but not onto segment 1, which
-- "slow" holds: the current segment grows instead.
SELECT pg_temp.turn();
SELECT pgq.append('ring', '{"k": "d1"}') AS id;
SELECT pg_temp.turn();
SELECT pgq.append('ring', '{"k": "d2"}') AS id;
SELECT * FROM ring_ledger;
SELECT * FROM ring_rows;
SELECT * FROM stats WHERE stream = 'ring';

-- Once "slow" (and "fast") finished them, the sealed segments go; the
-- current one stays.
SELECT * FROM pg_temp.take('ring', 'slow');
SELECT expired_requeued FROM pgq.maintain();
SELECT * FROM ring_ledger;
SELECT * FROM ring_rows;
SELECT * FROM pg_temp.take('ring', 'fast');
SELECT expired_requeued FROM pgq.maintain();
SELECT * FROM ring_ledger;
SELECT * FROM ring_rows;
SELECT * FROM stats WHERE stream = 'ring';

-- A consumer that does not read holds the segments it has not finished;
-- unregistered, it no longer does.
SELECT pgq.register_consumer('ring', 'stuck');
SELECT pgq.append('ring', '{"k": "e1"}') AS id;
SELECT * FROM pg_temp.take('ring', 'fast');
SELECT * FROM pg_temp.take('ring', 'slow');
SELECT pg_temp.turn();
SELECT expired_requeued FROM pgq.maintain();
SELECT * FROM ring_ledger;
SELECT * FROM ring_rows;
SELECT * FROM stats WHERE stream = 'ring';
SELECT pgq.unregister_consumer('ring', 'stuck');
SELECT expired_requeued FROM pgq.maintain();
SELECT * FROM ring_ledger;
SELECT * FROM ring_rows;

------------------------------------------------------------------------------
-- Bad input: SQLSTATE and message of each, nothing half-written.

SELECT count(*) AS order_events_before FROM pgq.stream_events WHERE stream_id = 1;

-- Full errors, to show the hints a user sees.
SELECT pgq.append('missing', '{}');
SELECT * FROM pgq.next_batch('orders', 'nobody');

SET pgq.max_payload_bytes = 64;
SELECT s AS statement, pg_temp.error_of(s) AS error FROM (VALUES
  -- names
  ($$SELECT pgq.create_stream(NULL)$$),
  ($$SELECT pgq.create_stream('Upper')$$),
  ($$SELECT pgq.create_stream('a b')$$),
  ($$SELECT pgq.create_stream(repeat('a', 64))$$),
  ($$SELECT pgq.register_consumer('orders', NULL)$$),
  ($$SELECT pgq.register_consumer('orders', 'Bad')$$),
  -- rotation
  ($$SELECT pgq.create_stream('r1', rotation => '0.5 seconds')$$),
  ($$SELECT pgq.create_stream('r2', rotation => '0')$$),
  ($$SELECT pgq.create_stream('r3', rotation => '-1 second')$$),
  ($$SELECT pgq.create_stream('r4', rotation => '101 years')$$),
  ($$SELECT pgq.create_stream('r5', rotation => NULL)$$),
  ($$SELECT pgq.alter_stream('orders', rotation => '0.999 seconds')$$),
  ($$SELECT pgq.alter_stream('orders', rotation => NULL)$$),
  -- duplicates and unknown streams
  ($$SELECT pgq.create_stream('orders')$$),
  ($$SELECT pgq.alter_stream('missing', '1 hour')$$),
  ($$SELECT pgq.drop_stream('missing')$$),
  ($$SELECT pgq.drop_stream(NULL)$$),
  ($$SELECT pgq.append('missing', '{}')$$),
  ($$SELECT pgq.append_many('missing', ARRAY['{}']::jsonb[])$$),
  ($$SELECT pgq.register_consumer('missing', 'c')$$),
  ($$SELECT pgq.unregister_consumer('missing', 'c')$$),
  ($$SELECT pgq.next_batch('missing', 'c')$$),
  ($$SELECT pgq.next_batch('orders', 'nobody')$$),
  -- payloads (pgq.max_payload_bytes is 64 here)
  ($$SELECT pgq.append('orders', NULL)$$),
  ($$SELECT pgq.append('orders', jsonb_build_object('k', repeat('x', 100)))$$),
  ($$SELECT pgq.append_many('orders', NULL)$$),
  ($$SELECT pgq.append_many('orders', ARRAY['{"k": 1}', '{"k": 2}', NULL]::jsonb[])$$),
  ($$SELECT pgq.append_many('orders', ARRAY['{"k": 1}', '{"k": 2}', jsonb_build_object('k', repeat('x', 100))])$$),
  ($$SELECT pgq.append_many('orders', ARRAY[['{}'], ['{}']]::jsonb[])$$),
  -- next_batch
  ($$SELECT pgq.next_batch('orders', 'billing', 0)$$),
  ($$SELECT pgq.next_batch('orders', 'billing', -1)$$),
  ($$SELECT pgq.next_batch('orders', 'billing', 100001)$$),
  ($$SELECT pgq.next_batch('orders', 'billing', NULL)$$),
  ($$SELECT pgq.next_batch('orders', 'billing', 10, '-1 second')$$),
  -- finish_batch: twice, never given, not a batch id
  ($$SELECT pgq.finish_batch(NULL)$$),
  ($$SELECT pgq.finish_batch(0)$$),
  ($$SELECT pgq.finish_batch(-pg_temp.batch(1, 1))$$),
  ($$SELECT pgq.finish_batch(pg_temp.batch(1, 1))$$),
  ($$SELECT pgq.finish_batch(pg_temp.batch(1, 1000))$$),
  -- (batch numbers start at 1: number 0 is never given)
  ($$SELECT pgq.finish_batch(pg_temp.batch(1, 0))$$),
  ($$SELECT pgq.finish_batch(pg_temp.batch(999, 1))$$),
  -- grants
  ($$SELECT pgq.grant_stream(NULL, 'orders', 'produce')$$),
  ($$SELECT pgq.grant_stream('no_such_role', 'orders', 'produce')$$),
  ($$SELECT pgq.grant_stream(current_user, 'orders', 'read')$$),
  ($$SELECT pgq.grant_stream(current_user, 'orders', NULL)$$),
  ($$SELECT pgq.grant_stream(current_user, 'missing', 'produce')$$),
  ($$SELECT pgq.revoke_stream(current_user, 'orders', 'write')$$)
) AS t(s);
RESET pgq.max_payload_bytes;

-- A wait is refused where a transaction snapshot would never see new
-- events; without one it is fine there.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT pg_temp.error_of($$SELECT pgq.next_batch('orders', 'billing', 10, '1 second')$$);
SELECT count(*) FROM pgq.next_batch('orders', 'billing', 10, '0');
COMMIT;

-- Nothing was half-written: no event appended by the failed calls, no
-- stream or consumer created, positions unchanged, the session usable.
SELECT count(*) AS order_events_after FROM pgq.stream_events WHERE stream_id = 1;
SELECT name FROM pgq.streams ORDER BY name;
SELECT s.name AS stream, c.name AS consumer, c.batch_no, c.batch_open, c.finished_batches
  FROM pgq.stream_consumers c JOIN pgq.streams s USING (stream_id) ORDER BY 1, 2;
SELECT * FROM pg_temp.take('orders', 'billing');
SELECT * FROM pgq.append_many('orders', ARRAY['{"k": "after"}']::jsonb[]);
SELECT * FROM pg_temp.take('orders', 'billing');

------------------------------------------------------------------------------
-- Rights (docs/security.md): produce, consume, admin per stream; a stream's
-- owner holds all three and grants them; a grant on every stream (NULL) is
-- a superuser's.

CREATE ROLE pgq_s_maker;
CREATE ROLE pgq_s_writer;
CREATE ROLE pgq_s_reader;
CREATE ROLE pgq_s_other;
CREATE ROLE pgq_s_nobody;
SELECT pgq.grant_stream('pgq_s_maker', NULL, 'admin') AS granted,
       pgq.grant_stream('pgq_s_maker', NULL, 'admin') AS again;

-- The maker creates streams (admin on every stream) and owns them.
SET ROLE pgq_s_maker;
SELECT pgq.create_stream('clicks');
SELECT pgq.create_stream('views');
SELECT pgq.grant_stream('pgq_s_writer', 'clicks', 'produce') AS writer,
       pgq.grant_stream('pgq_s_reader', 'clicks', 'consume') AS reader,
       pgq.grant_stream('pgq_s_other', 'views', 'consume') AS other;
-- It may not grant on every stream, nor on a stream it does not own
-- (holding admin on it is not enough).
SELECT pg_temp.error_of($$SELECT pgq.grant_stream('pgq_s_nobody', NULL, 'consume')$$);
SELECT pg_temp.error_of($$SELECT pgq.revoke_stream('pgq_s_maker', NULL, 'admin')$$);
SELECT pg_temp.error_of($$SELECT pgq.grant_stream('pgq_s_nobody', 'orders', 'consume')$$);
-- Its admin right on every stream covers streams it does not own, but
-- gives no right to append or read there; as their owner it holds all
-- three on its own streams.
SELECT pgq.alter_stream('orders', rotation => '2 hours');
SELECT pg_temp.error_of($$SELECT pgq.append('orders', '{}')$$);
SELECT pg_temp.error_of($$SELECT pgq.next_batch('orders', 'billing')$$);
SELECT pgq.append('views', '{"k": "v1"}') > 0 AS appended;
SELECT pgq.register_consumer('views', 'maker');
-- An admin right on one stream: granted by its owner.
SELECT pgq.grant_stream('pgq_s_writer', 'views', 'admin');
RESET ROLE;
SELECT stream_id, name, owner FROM pgq.streams ORDER BY stream_id;
SELECT g.role, s.name AS stream, g.privilege
  FROM pgq.stream_grants g LEFT JOIN pgq.streams s USING (stream_id) ORDER BY 1::text, 2, 3;

-- The writer appends to clicks, and does nothing else.
SET ROLE pgq_s_writer;
SELECT pgq.append('clicks', '{"k": "c1"}') > 0 AS appended;
SELECT s AS statement, pg_temp.error_of(s) AS error FROM (VALUES
  ($$SELECT pgq.append('views', '{}')$$),
  ($$SELECT pgq.register_consumer('clicks', 'w')$$),
  ($$SELECT pgq.next_batch('clicks', 'w')$$),
  ($$SELECT pgq.unregister_consumer('clicks', 'r')$$),
  ($$SELECT pgq.alter_stream('clicks', '1 hour')$$),
  ($$SELECT pgq.drop_stream('clicks')$$),
  ($$SELECT pgq.create_stream('mine')$$),
  ($$SELECT pgq.grant_stream('pgq_s_writer', 'clicks', 'consume')$$),
  ($$SELECT pgq.grant_stream('pgq_s_writer', 'views', 'consume')$$),
  ($$SELECT pgq.register_consumer('views', 'w')$$)
) AS t(s);
-- Its admin right on views: altering it, unregistering its consumers.
SELECT pgq.alter_stream('views', rotation => '3 hours');
SELECT stream, consumer FROM pgq.stream_stats;
SELECT pgq.unregister_consumer('views', 'maker') AS unregistered;
RESET ROLE;

-- The reader registers, reads and finishes on clicks, and nothing else.
SET ROLE pgq_s_reader;
SELECT pgq.register_consumer('clicks', 'r');
SELECT pgq.append('clicks', '{"k": "c2"}');
RESET ROLE;
SELECT pgq.append('clicks', '{"k": "c2"}') > 0 AS appended;
SET ROLE pgq_s_reader;
SELECT batch_id >> 32 AS consumer_id, batch_id & 4294967295 AS batch_no, payload
  FROM pgq.next_batch('clicks', 'r');
SELECT s AS statement, pg_temp.error_of(s) AS error FROM (VALUES
  ($$SELECT pgq.append('clicks', '{}')$$),
  ($$SELECT pgq.register_consumer('views', 'r')$$),
  ($$SELECT pgq.alter_stream('clicks', '1 hour')$$),
  ($$SELECT pgq.drop_stream('clicks')$$)
) AS t(s);
SELECT stream, consumer, pending_events, batch_open FROM pgq.stream_stats;
RESET ROLE;

-- A role without rights gets 42501 from everything, and sees no stream.
SET ROLE pgq_s_nobody;
SELECT s AS statement, pg_temp.error_of(s) AS error FROM (VALUES
  ($$SELECT pgq.append('clicks', '{}')$$),
  ($$SELECT pgq.append_many('clicks', ARRAY['{}']::jsonb[])$$),
  ($$SELECT pgq.register_consumer('clicks', 'n')$$),
  ($$SELECT pgq.unregister_consumer('clicks', 'r')$$),
  ($$SELECT pgq.next_batch('clicks', 'r')$$),
  ($$SELECT pgq.finish_batch(pg_temp.batch(10, 1))$$),
  ($$SELECT pgq.create_stream('mine')$$),
  ($$SELECT pgq.alter_stream('clicks', '1 hour')$$),
  ($$SELECT pgq.drop_stream('clicks')$$),
  ($$SELECT pgq.drop_stream('clicks', if_exists => true)$$)
) AS t(s);
SELECT count(*) AS visible_consumers FROM pgq.stream_stats;
RESET ROLE;

-- A consume right on views does not let a role finish a batch of clicks:
-- the batch is answered as one that does not exist (nothing about clicks
-- leaks through batch ids). A role with consume on no stream is refused
-- before anything is looked up.
SET ROLE pgq_s_other;
SELECT pgq.register_consumer('views', 'o');
SELECT pg_temp.error_of($$SELECT pgq.finish_batch(pg_temp.batch(10, 1))$$);
SELECT pg_temp.error_of($$SELECT pgq.next_batch('clicks', 'r')$$);
SELECT stream, consumer FROM pgq.stream_stats;
RESET ROLE;
-- (the batch is still open)
SELECT stream, consumer, pending_events, batch_open FROM stats WHERE stream = 'clicks';

-- The reader finishes its own batch.
SET ROLE pgq_s_reader;
SELECT pgq.finish_batch(pg_temp.batch(10, 1)) AS finished;
SELECT count(*) FROM pgq.next_batch('clicks', 'r');
RESET ROLE;

-- The owner (the maker) revokes; revoking what was not granted changes
-- nothing; the writer then may not append.
SET ROLE pgq_s_maker;
SELECT pgq.revoke_stream('pgq_s_writer', 'clicks', 'produce') AS revoked,
       pgq.revoke_stream('pgq_s_writer', 'clicks', 'produce') AS again;
-- An admin (here on every stream) may unregister any consumer.
SELECT pgq.unregister_consumer('views', 'o');
RESET ROLE;
SET ROLE pgq_s_writer;
SELECT pg_temp.error_of($$SELECT pgq.append('clicks', '{}')$$);
RESET ROLE;

-- A superuser grants and revokes on any stream, and on every stream.
SELECT pgq.grant_stream('pgq_s_nobody', 'clicks', 'produce') AS one,
       pgq.grant_stream('pgq_s_nobody', NULL, 'consume') AS every;
SET ROLE pgq_s_nobody;
SELECT pgq.append('clicks', '{"k": "c3"}') > 0 AS appended;
SELECT pgq.register_consumer('views', 'n');
SELECT pg_temp.error_of($$SELECT pgq.append('views', '{}')$$);
RESET ROLE;
SELECT pgq.revoke_stream('pgq_s_nobody', NULL, 'consume') AS revoked;

-- Dropping a stream takes its consumers and grants with it.
SELECT pgq.drop_stream('clicks');
SELECT g.role, s.name AS stream, g.privilege
  FROM pgq.stream_grants g LEFT JOIN pgq.streams s USING (stream_id) ORDER BY 1::text, 2, 3;
SELECT s.name AS stream, c.name AS consumer
  FROM pgq.stream_consumers c JOIN pgq.streams s USING (stream_id) ORDER BY 1, 2;

DROP VIEW stats, ring_ledger, ring_rows;
DROP EXTENSION pgq_cpp;
DROP ROLE pgq_s_maker;
DROP ROLE pgq_s_writer;
DROP ROLE pgq_s_reader;
DROP ROLE pgq_s_other;
DROP ROLE pgq_s_nobody;
