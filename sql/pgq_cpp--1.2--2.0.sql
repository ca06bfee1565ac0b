-- pgq_cpp 1.2 -> 2.0, run by ALTER EXTENSION pgq_cpp UPDATE (and after the
-- earlier scripts by a fresh CREATE EXTENSION). The rules of
-- pgq_cpp--1.0--1.1.sql hold: search_path pg_catalog only, every object of
-- ours qualified with pgq. and every operator with OPERATOR(pg_catalog.x).
--
-- Streams (issue 21, SPEC §10; docs/streams.md, ADR 0020): events appended
-- to a ring of segment tables per stream, read by registered consumers in
-- batches cut by transaction snapshots, reclaimed by TRUNCATE.

\echo Use "ALTER EXTENSION pgq_cpp UPDATE" to load this file. \quit

CREATE SEQUENCE pgq.stream_id_seq AS integer;
SELECT pg_catalog.pg_extension_config_dump('pgq.stream_id_seq', '');

CREATE TABLE pgq.streams (
    stream_id  integer            PRIMARY KEY,
    name       text               NOT NULL UNIQUE,
    owner      pg_catalog.regrole NOT NULL,  -- dumped and restored by name
    rotation   interval           NOT NULL,
    created_at timestamptz        NOT NULL DEFAULT pg_catalog.now()
);
SELECT pg_catalog.pg_extension_config_dump('pgq.streams', '');
COMMENT ON TABLE pgq.streams IS
    'streams and their owners; written by create_stream, alter_stream and drop_stream';

CREATE TABLE pgq.stream_grants (
    role      pg_catalog.regrole NOT NULL,
    stream_id integer            NOT NULL,  -- 0: every stream, present and future
    privilege text               NOT NULL
              CHECK (privilege OPERATOR(pg_catalog.=) ANY ('{produce,consume,admin}'::pg_catalog.text[])),
    PRIMARY KEY (role, stream_id, privilege)
);
SELECT pg_catalog.pg_extension_config_dump('pgq.stream_grants', '');
COMMENT ON TABLE pgq.stream_grants IS
    'who may append to, read or administer which stream (0: every stream); written by grant_stream and revoke_stream';

-- The ledger of the segment rings (src/pg/segments.h): per ring, which
-- segment takes new rows; per segment, whether it is empty (truncated and
-- not made current since). A stream's ring has the stream's id.
CREATE TABLE pgq.rings (
    ring_id    integer     PRIMARY KEY,
    segments   smallint    NOT NULL CHECK (segments OPERATOR(pg_catalog.>=) 2),
    current    smallint    NOT NULL,
    generation bigint      NOT NULL DEFAULT 0,   -- rotations so far
    rotated_at timestamptz NOT NULL
);
SELECT pg_catalog.pg_extension_config_dump('pgq.rings', '');
COMMENT ON TABLE pgq.rings IS
    'rings of segment tables (streams): which segment takes new rows; turned by maintenance';

CREATE TABLE pgq.ring_segments (
    ring_id      integer     NOT NULL REFERENCES pgq.rings ON DELETE CASCADE,
    segment      smallint    NOT NULL,
    empty        boolean     NOT NULL,   -- truncated, not current since
    opened_at    timestamptz,            -- made current
    sealed_at    timestamptz,            -- stopped being current
    truncated_at timestamptz,
    PRIMARY KEY (ring_id, segment)
);
SELECT pg_catalog.pg_extension_config_dump('pgq.ring_segments', '');
COMMENT ON TABLE pgq.ring_segments IS
    'the segments of each ring and whether each is empty; a sealed segment is truncated once every reader has passed it';

-- The events. One partition per stream (a table partitioned in turn by
-- segment, the stream's ring), created by create_stream: those tables are
-- not members of the extension, so pg_dump dumps them and their rows, and
-- DROP EXTENSION drops them with this parent.
CREATE TABLE pgq.stream_events (
    stream_id   integer     NOT NULL,
    segment     smallint    NOT NULL,
    txid        xid8        NOT NULL,   -- the appending transaction (pg_current_xact_id)
    id          bigint      NOT NULL,
    appended_at timestamptz NOT NULL,
    payload     jsonb       NOT NULL
) PARTITION BY LIST (stream_id);
-- A batch is read in (txid, id) order from a consumer's cursor: each
-- stream's table has that index (created with it; not here, on the root, as
-- pg_restore would then find the partitions' indexes made by ATTACH before
-- it creates them itself).
COMMENT ON TABLE pgq.stream_events IS
    'events of every stream: a partition per stream (pgq.stream_events_<id>), each a ring of segments (_<id>_<segment>) dropped by TRUNCATE';

CREATE SEQUENCE pgq.stream_event_id_seq AS bigint;
SELECT pg_catalog.pg_extension_config_dump('pgq.stream_event_id_seq', '');

CREATE SEQUENCE pgq.stream_consumer_id_seq AS integer;
SELECT pg_catalog.pg_extension_config_dump('pgq.stream_consumer_id_seq', '');

-- A consumer's position: every event whose transaction is visible in
-- done_snapshot is finished; of the window (done_snapshot, window_end] the
-- events up to (cursor_txid, cursor_id) in (txid, id) order are too. The
-- open batch is the window's events after the cursor up to (batch_end_txid,
-- batch_end_id). A batch id is consumer_id * 2^32 + batch_no.
CREATE TABLE pgq.stream_consumers (
    consumer_id       integer            PRIMARY KEY,
    stream_id         integer            NOT NULL REFERENCES pgq.streams ON DELETE CASCADE,
    name              text               NOT NULL,
    registered_at     timestamptz        NOT NULL DEFAULT pg_catalog.now(),
    done_snapshot     pg_catalog.pg_snapshot NOT NULL,
    done_at           timestamptz        NOT NULL,
    window_end        pg_catalog.pg_snapshot,
    window_end_at     timestamptz,
    cursor_txid       xid8               NOT NULL DEFAULT '0',
    cursor_id         bigint             NOT NULL DEFAULT 0,
    batch_no          bigint             NOT NULL DEFAULT 0,
    batch_open        boolean            NOT NULL DEFAULT false,
    batch_end_txid    xid8,
    batch_end_id      bigint,
    batch_events      integer,
    batch_ends_window boolean,
    batch_opened_at   timestamptz,
    finished_batches  bigint             NOT NULL DEFAULT 0,
    finished_events   bigint             NOT NULL DEFAULT 0,
    last_finished_at  timestamptz,
    UNIQUE (stream_id, name)
) WITH (fillfactor = 50);
SELECT pg_catalog.pg_extension_config_dump('pgq.stream_consumers', '');
COMMENT ON TABLE pgq.stream_consumers IS
    'consumers of streams and their positions (snapshots, a cursor, the open batch); written by register_consumer, next_batch and finish_batch';

-- Functions -----------------------------------------------------------------

CREATE FUNCTION pgq.create_stream(stream text, rotation interval DEFAULT '2 hours',
                                  if_not_exists boolean DEFAULT false)
RETURNS void AS 'MODULE_PATHNAME', 'pgq_create_stream' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.create_stream(text, interval, boolean) IS
    'creates a stream (a ring of three segment tables, turned every rotation); admin right on every stream';

CREATE FUNCTION pgq.alter_stream(stream text, rotation interval)
RETURNS void AS 'MODULE_PATHNAME', 'pgq_alter_stream' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.alter_stream(text, interval) IS
    'changes how often a stream''s ring turns; admin right on the stream';

CREATE FUNCTION pgq.drop_stream(stream text, if_exists boolean DEFAULT false)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_drop_stream' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.drop_stream(text, boolean) IS
    'drops a stream with its events, consumers and grants; whether it existed; admin right on the stream';

CREATE FUNCTION pgq.append(stream text, payload jsonb)
RETURNS bigint AS 'MODULE_PATHNAME', 'pgq_append' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.append(text, jsonb) IS
    'appends an event to a stream, visible to its consumers when the transaction commits; its id; produce right';

CREATE FUNCTION pgq.append_many(stream text, payloads jsonb[])
RETURNS SETOF bigint AS 'MODULE_PATHNAME', 'pgq_append_many' LANGUAGE C VOLATILE ROWS 100;
COMMENT ON FUNCTION pgq.append_many(text, jsonb[]) IS
    'appends one event per payload, in order; their ids in input order; produce right';

CREATE FUNCTION pgq.register_consumer(stream text, consumer text)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_register_consumer' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.register_consumer(text, text) IS
    'registers a consumer, which then reads every event committed after this call commits; false if it was registered; consume right';

CREATE FUNCTION pgq.unregister_consumer(stream text, consumer text)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_unregister_consumer' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.unregister_consumer(text, text) IS
    'forgets a consumer and its position (it no longer holds the stream''s segments); whether it was registered; consume or admin right';

CREATE FUNCTION pgq.next_batch(stream text, consumer text, max_events integer DEFAULT 1000,
                               wait interval DEFAULT '0',
                               OUT batch_id bigint, OUT event_id bigint, OUT payload jsonb,
                               OUT appended_at timestamptz)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'pgq_next_batch' LANGUAGE C VOLATILE ROWS 1000;
COMMENT ON FUNCTION pgq.next_batch(text, text, integer, interval) IS
    'the consumer''s next batch (its open one again until finished): up to max_events events in commit order, waiting up to wait for some; consume right';

CREATE FUNCTION pgq.finish_batch(batch_id bigint)
RETURNS integer AS 'MODULE_PATHNAME', 'pgq_finish_batch' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.finish_batch(bigint) IS
    'moves the batch''s consumer past it; how many events it held; consume right';

CREATE FUNCTION pgq.grant_stream(role name, stream text, privilege text)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_grant_stream' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.grant_stream(name, text, text) IS
    'gives role the privilege (produce, consume or admin) on stream (NULL: every stream, by a superuser); true if it did not hold it yet; the stream''s owner';

CREATE FUNCTION pgq.revoke_stream(role name, stream text, privilege text)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_revoke_stream' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.revoke_stream(name, text, text) IS
    'takes back a grant made with pgq.grant_stream; true if there was one';

CREATE FUNCTION pgq.stream_consumer_stats(
    OUT stream text, OUT consumer text, OUT lag interval, OUT pending_events bigint,
    OUT batch_open boolean, OUT batch_age interval, OUT finished_events bigint,
    OUT last_finished_at timestamptz)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'pgq_stream_consumer_stats' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.stream_consumer_stats() IS
    'one row per consumer of the streams the reader holds a right on: how far behind it is';

CREATE VIEW pgq.stream_stats AS SELECT * FROM pgq.stream_consumer_stats();
GRANT SELECT ON pgq.stream_stats TO PUBLIC;
COMMENT ON VIEW pgq.stream_stats IS
    'one row per consumer of the streams the reader holds a right on: lag (age of its oldest unfinished event), pending events (counted up to 100000), its open batch';

-- The outbox feeds streams too (SPEC §10): pgq.subscribe(topic, stream =>
-- ...) makes publish append the event, in the envelope queue jobs get
-- ({event_id, topic, payload[, group_key]}), to the stream in the
-- publishing transaction. Subscribing takes the admin right on the stream
-- and the subscribe right on the topic, as for a queue (ADR 0013).
CREATE TABLE pgq.stream_subscriptions (
    topic      text        NOT NULL REFERENCES pgq.topics ON DELETE CASCADE ON UPDATE CASCADE,
    stream_id  integer     NOT NULL REFERENCES pgq.streams ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (topic, stream_id)
);
SELECT pg_catalog.pg_extension_config_dump('pgq.stream_subscriptions', '');
COMMENT ON TABLE pgq.stream_subscriptions IS
    'which streams receive which topic''s events; written by subscribe and unsubscribe';

DROP FUNCTION pgq.subscribe(text, text);
CREATE FUNCTION pgq.subscribe(topic text, queue text DEFAULT NULL, stream text DEFAULT NULL)
RETURNS void AS 'MODULE_PATHNAME', 'pgq_subscribe' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.subscribe(text, text, text) IS
    'routes the topic''s events into a queue (a job each) or a stream (an event each); admin right on the queue or stream and the subscribe right on the topic';

DROP FUNCTION pgq.unsubscribe(text, text);
CREATE FUNCTION pgq.unsubscribe(topic text, queue text DEFAULT NULL, stream text DEFAULT NULL)
RETURNS boolean AS 'MODULE_PATHNAME', 'pgq_unsubscribe' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION pgq.unsubscribe(text, text, text) IS
    'stops routing a topic''s events into a queue or stream; whether it was subscribed; admin on the queue or stream, or owner of the topic';
