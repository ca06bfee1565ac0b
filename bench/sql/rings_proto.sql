-- Issue 33's prototype (bench/proto/rings.cpp, built with make RINGS_PROTO=1):
-- plain jobs on an append-only ring, measured by bench/rings_proto.sh. Not
-- part of the extension: the bench creates these beside it.
CREATE SCHEMA pgq_ring;
-- A job as enqueued: appended once, never updated, no index.
CREATE TABLE pgq_ring.entries (id bigint NOT NULL, queue_id int NOT NULL, priority smallint NOT NULL,
  max_attempts smallint NOT NULL, run_at timestamptz NOT NULL, enqueued_at timestamptz NOT NULL,
  payload jsonb NOT NULL);
-- A claim: which attempt, until when, of which entry.
CREATE TABLE pgq_ring.receipts (id bigint NOT NULL, attempt int NOT NULL,
  lease_until timestamptz NOT NULL, claimed_at timestamptz NOT NULL, entry tid NOT NULL);
-- An outcome.
CREATE TABLE pgq_ring.closures (id bigint NOT NULL, attempt int NOT NULL, outcome "char" NOT NULL,
  at timestamptz NOT NULL);
CREATE SEQUENCE pgq_ring.ids;

CREATE FUNCTION pgq_ring.enqueue(queue text, payload jsonb) RETURNS bigint
  LANGUAGE c STRICT AS 'pgq_cpp', 'pgq_ring_enqueue';
CREATE FUNCTION pgq_ring.enqueue_many(queue text, payloads jsonb[]) RETURNS SETOF bigint
  LANGUAGE c STRICT AS 'pgq_cpp', 'pgq_ring_enqueue_many';
CREATE FUNCTION pgq_ring.claim(queue text, n int, lease interval DEFAULT '2 min',
  OUT id bigint, OUT attempt int, OUT payload jsonb) RETURNS SETOF record
  LANGUAGE c STRICT AS 'pgq_cpp', 'pgq_ring_claim';
CREATE FUNCTION pgq_ring.complete(id bigint, attempt int) RETURNS boolean
  LANGUAGE c STRICT AS 'pgq_cpp', 'pgq_ring_complete';
CREATE FUNCTION pgq_ring.complete_many(ids bigint[], attempts int[]) RETURNS integer
  LANGUAGE c STRICT AS 'pgq_cpp', 'pgq_ring_complete_many';
CREATE FUNCTION pgq_ring.reset() RETURNS void
  LANGUAGE c AS 'pgq_cpp', 'pgq_ring_reset';
