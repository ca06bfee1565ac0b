// Streams: the catalog, a backend's cache of it, appends, maintenance.
#include <map>
#include <memory>

#include "pg/args.h"
#include "pg/ledger.h"
#include "pg/invalidation.h"
#include "pg/row_insert.h"
#include "store/grants.h"
#include "store/stream_statements.h"

extern "C" {
#include "access/transam.h"
#include "catalog/namespace.h"
#include "commands/sequence.h"
#include "storage/lmgr.h"
#include "utils/lsyscache.h"
#include "utils/xid8.h"
}

namespace pgq::store::streams {

namespace {

pg::Statement find_stream = {
    "SELECT stream_id, owner::oid AS owner, rotation FROM pgq.streams WHERE name = $1",
    1,
    {TEXTOID},
    nullptr};

pg::Statement name_of = {
    "SELECT name FROM pgq.streams WHERE stream_id = $1", 1, {INT4OID}, nullptr};

pg::Statement insert_stream = {R"sql(
INSERT INTO pgq.streams (stream_id, name, owner, rotation)
VALUES (pg_catalog.nextval('pgq.stream_id_seq')::int4, $1, $2::oid::pg_catalog.regrole, $3)
ON CONFLICT (name) DO NOTHING
RETURNING stream_id)sql",
                               3,
                               {TEXTOID, OIDOID, INTERVALOID},
                               nullptr};

pg::Statement set_rotation = {"UPDATE pgq.streams SET rotation = $2 WHERE stream_id = $1",
                              2,
                              {INT4OID, INTERVALOID},
                              nullptr};

pg::Statement delete_stream = {R"sql(
WITH grants AS (DELETE FROM pgq.stream_grants WHERE stream_id = $1)
DELETE FROM pgq.streams WHERE stream_id = $1)sql",
                               1,
                               {INT4OID},
                               nullptr};

pg::Statement stream_ids = {"SELECT stream_id FROM pgq.streams ORDER BY stream_id", 0, {}, nullptr};

// Read without a lock: an idle pass must not take a transaction id.
pg::Statement streams_to_maintain = {R"sql(
SELECT s.stream_id, s.rotation, r.rotated_at,
       EXISTS (SELECT 1 FROM pgq.ring_segments g
                WHERE g.ring_id = r.ring_id AND g.segment <> r.current AND NOT g.empty) AS sealed,
       (SELECT g.empty FROM pgq.ring_segments g
         WHERE g.ring_id = r.ring_id AND g.segment = (r.current + 1) % r.segments) AS next_empty
  FROM pgq.streams s JOIN pgq.rings r ON r.ring_id = s.stream_id
 ORDER BY s.stream_id)sql",
                                     0,
                                     {},
                                     nullptr};

// Each stream's ring: bytes on disk and the estimated number of events.
pg::Statement stream_sizes = {R"sql(
SELECT s.name,
       COALESCE((SELECT sum(pg_catalog.pg_total_relation_size(t.relid))
                   FROM pg_catalog.pg_partition_tree(
                          ('pgq.stream_events_' || s.stream_id)::pg_catalog.regclass) t), 0)::int8
         AS bytes,
       COALESCE((SELECT sum(GREATEST(c.reltuples, 0))
                   FROM pg_catalog.pg_partition_tree(
                          ('pgq.stream_events_' || s.stream_id)::pg_catalog.regclass) t
                   JOIN pg_catalog.pg_class c ON c.oid = t.relid
                  WHERE t.isleaf), 0)::int8 AS events
  FROM pgq.streams s ORDER BY s.name)sql",
                              0,
                              {},
                              nullptr};

// $1 one stream's id (NULL: every stream). Each stream's ring and its
// segments: the columns of pgq.stream_segments, then stream_id. A segment
// is current (taking appends), sealed (holding events not every consumer
// has passed) or empty (truncated since it was sealed).
pg::Statement ring_segments = {R"sql(
SELECT s.name, s.rotation, r.segments::int4, r.current::int4, r.generation, r.rotated_at,
       g.segment::int4,
       CASE WHEN g.segment = r.current THEN 'current' WHEN g.empty THEN 'empty' ELSE 'sealed' END,
       pg_catalog.pg_total_relation_size(pg_catalog.to_regclass(
         'pgq.stream_events_' || s.stream_id || '_' || g.segment)),
       g.opened_at, g.sealed_at, g.truncated_at, s.stream_id
  FROM pgq.streams s
  JOIN pgq.rings r ON r.ring_id = s.stream_id
  JOIN pgq.ring_segments g ON g.ring_id = r.ring_id
 WHERE $1 IS NULL OR s.stream_id = $1
 ORDER BY s.name, g.segment)sql",
                               1,
                               {INT4OID},
                               nullptr};

// The cache: streams by name, with their rings. It depends on pgq.streams
// (create_stream, alter_stream and drop_stream announce a change) and
// pgq.rings (a rotation announces one, pg/segments.h), nothing else.
// INVARIANT: every entry's `epoch` is the epoch `cached` was marked at.
struct CachedStream {
  std::string name;
  Stream stream;
};
std::vector<CachedStream>* cache = nullptr;
pg::CacheEpoch cached{pg::invalidation::kStreams | pg::invalidation::kRings};

std::vector<CachedStream>& Cache() {
  if (cache == nullptr) cache = new std::vector<CachedStream>();
  if (!cached.Valid()) {
    cache->clear();
    cached.Mark(cached.Current());
  }
  return *cache;
}

Oid EventIdSequence() {
  static Oid sequence = InvalidOid;
  static pg::CacheEpoch known{pg::invalidation::kStreams};
  if (OidIsValid(sequence) && known.Valid()) return sequence;
  const uint64 begun = known.Begin();
  sequence = pg::Guard([] {
    const Oid schema = get_namespace_oid("pgq", false);
    return get_relname_relid("stream_event_id_seq", schema);
  });
  known.Mark(begun);
  return sequence;
}

std::optional<Stream> Load(pg::SpiSession& spi, std::string_view name) {
  pg::Params params;
  params.Set(0, pg::TextDatum(name));
  pg::Result row = spi.Execute(find_stream, params, 1);
  if (row.empty()) return std::nullopt;
  Stream stream;
  stream.name = std::string(name);
  stream.id = row.Int32(0, "stream_id");
  bool is_null = false;
  stream.owner = DatumGetObjectId(row.Value(0, "owner", &is_null));
  stream.rotation_us =
      pg::IntervalMicros(DatumGetIntervalP(row.Value(0, "rotation", &is_null)), "rotation");
  row.Free();
  if (!pg::segments::LoadRing(spi, kRoot, stream.id, &stream.ring)) {
    pg::Raise(ERRCODE_DATA_CORRUPTED, "stream \"" + std::string(name) + "\" has no ring",
              "pgq.rings has no row for stream id " + std::to_string(stream.id) + ".",
              "Drop the stream and create it again.");
  }
  return stream;
}

std::map<int32, std::unique_ptr<detail::StreamStatements>>* prepared = nullptr;

pg::Statement lock_stream = {
    "SELECT 1 FROM pgq.streams WHERE stream_id = $1 FOR UPDATE", 1, {INT4OID}, nullptr};

bool NeedsRebase(pg::SpiSession& spi, int32 stream_id);
void Rebase(pg::SpiSession& spi, int32 stream_id);

}  // namespace

namespace detail {

namespace {

// $2 NULL: a window cut now, at this statement's snapshot, which the
// statement returns (it is taken after the consumer's row lock: the caller
// locked it with an earlier statement). $10: the events are cut after the
// one that takes their payloads' stored size (pg_column_size: what the
// result holds of each) to $10 bytes, the first always kept (2.0.1); each
// row says the size up to and including it. The cut depends only on the
// rows, so a window read again from the same cursor cuts at the same event.
std::string ReadWindowSql(const std::string& table) {
  const std::string to = "COALESCE($2, pg_catalog.pg_current_snapshot())";
  return R"sql(
SELECT txid, id, appended_at, payload, trace_context, )sql" +
         to + R"sql( AS cut, pg_catalog.statement_timestamp() AS cut_at, bytes_through FROM (
SELECT txid, id, appended_at, payload, trace_context,
       sum(pg_catalog.pg_column_size(payload)) OVER (ORDER BY txid, id ROWS UNBOUNDED PRECEDING)
         AS bytes_through FROM (
  (SELECT txid, id, appended_at, payload, trace_context FROM )sql" +
         table + R"sql(
    WHERE txid = ANY (ARRAY(SELECT x FROM pg_catalog.pg_snapshot_xip($1) AS x
                             WHERE pg_catalog.pg_visible_in_snapshot(x, )sql" +
         to + R"sql()))
      AND (txid, id) > ($8, $9) AND (txid, id) <= ($5, $6)
    ORDER BY txid, id LIMIT $7)
  UNION ALL
  (SELECT txid, id, appended_at, payload, trace_context FROM )sql" +
         table + R"sql(
    WHERE (txid, id) > ($3, $4) AND (txid, id) <= ($5, $6)
      AND txid < pg_catalog.pg_snapshot_xmax()sql" +
         to + R"sql()
      AND pg_catalog.pg_visible_in_snapshot(txid, )sql" +
         to + R"sql()
    ORDER BY txid, id LIMIT $7)) AS window_events
ORDER BY txid, id LIMIT $7) AS counted
WHERE bytes_through - pg_catalog.pg_column_size(payload) < $10
ORDER BY txid, id)sql";
}

// Every event of a transaction visible in a snapshot is finished, so a
// segment is finished for a consumer when all its transactions are: the
// newest below the snapshot's xmax, none in its in-progress list.
std::string SegmentFinishedSql(const std::string& table) {
  return R"sql(
SELECT NOT EXISTS (
  SELECT 1 FROM pgq.stream_consumers c
   WHERE c.stream_id = $1
     AND ((SELECT e.txid FROM )sql" +
         table + R"sql( e WHERE e.segment = $2
            ORDER BY e.txid DESC, e.id DESC LIMIT 1) >= pg_catalog.pg_snapshot_xmax(c.done_snapshot)
          OR EXISTS (SELECT 1 FROM )sql" +
         table + R"sql( e
                      WHERE e.segment = $2
                        AND e.txid = ANY (ARRAY(SELECT pg_catalog.pg_snapshot_xip(c.done_snapshot))))))
    AS finished)sql";
}

// A consumer's unfinished events in four disjoint parts, each read through
// the (txid, id) index from where it starts and cut at $7 rows, so the work
// is bounded whatever the backlog (2.0.1; 2.0 scanned from the done
// snapshot's xmin, past every finished event a long transaction elsewhere
// kept above it). With a window (done, window end]: (1) the window's
// events of transactions in progress at `done`, after the cursor; (2) its
// events of later transactions, from the later of the cursor and done's
// xmax ($5, $6); then, of S = the window's end (or `done` without a
// window), (3) the events of the transactions in progress at S and (4)
// those of transactions S did not know. An event is unfinished exactly
// when it is in one of them (store/streams.h: the position).
// Each consumer of the stream $1 with its unfinished events in four index
// ranges from its position: their keys read by index-only scans (no
// payload) and counted, at most $2 a range, and the append time of the
// first of them in (txid, id) order -- the event the consumer reads next --
// read by its key. One statement for all of a stream's consumers, so its
// scans are set up once and rescanned per consumer (3.0: issue 31, what a
// scrape costs).
std::string ConsumerStatsSql(const std::string& table) {
  const std::string ranges[] = {
      // the window's in-progress transactions, past the cursor
      "txid = ANY (ARRAY(SELECT x FROM pg_catalog.pg_snapshot_xip(c.done_snapshot) AS x\n"
      "                   WHERE pg_catalog.pg_visible_in_snapshot(x, c.window_end)))\n"
      "      AND (txid, id) > (c.cursor_txid, c.cursor_id)",
      // the rest of the open window, from the later of the cursor and the
      // done snapshot's xmax
      "c.window_end IS NOT NULL AND (txid, id) > (start.txid, start.id)\n"
      "      AND txid < pg_catalog.pg_snapshot_xmax(c.window_end)\n"
      "      AND pg_catalog.pg_visible_in_snapshot(txid, c.window_end)",
      // in progress when the window (or the done snapshot) was cut
      "txid = ANY (ARRAY(SELECT pg_catalog.pg_snapshot_xip(COALESCE(c.window_end, "
      "c.done_snapshot))))",
      // past it
      "txid >= pg_catalog.pg_snapshot_xmax(COALESCE(c.window_end, c.done_snapshot))"};
  std::string keys;
  for (const std::string& range : ranges) {
    keys += std::string(keys.empty() ? "" : "\n     UNION ALL\n     ") + "(SELECT txid, id FROM " +
            table + "\n       WHERE " + range + "\n       ORDER BY txid, id LIMIT $2)";
  }
  return R"sql(
SELECT s.name AS stream, c.name AS consumer, c.batch_open, c.batch_opened_at, c.finished_events,
       c.last_finished_at, p.pending, p.oldest
  FROM pgq.stream_consumers c
  JOIN pgq.streams s ON s.stream_id = c.stream_id
 CROSS JOIN LATERAL (
   SELECT CASE WHEN (c.cursor_txid, c.cursor_id) >= (pg_catalog.pg_snapshot_xmax(c.done_snapshot), 0::int8)
               THEN c.cursor_txid ELSE pg_catalog.pg_snapshot_xmax(c.done_snapshot) END AS txid,
          CASE WHEN (c.cursor_txid, c.cursor_id) >= (pg_catalog.pg_snapshot_xmax(c.done_snapshot), 0::int8)
               THEN c.cursor_id ELSE 0::int8 END AS id) AS start
 CROSS JOIN LATERAL (
   WITH unfinished AS MATERIALIZED (
     )sql" +
         keys + R"sql()
   SELECT (SELECT count(*) FROM unfinished) AS pending,
          (SELECT e.appended_at FROM )sql" +
         table + R"sql( e,
                  (SELECT txid, id FROM unfinished ORDER BY txid, id LIMIT 1) AS f
            WHERE e.txid = f.txid AND e.id = f.id) AS oldest) AS p
 WHERE c.stream_id = $1
 ORDER BY c.name)sql";
}

// The largest transaction ids stored with the stream: the newest event's,
// and the largest xmax of a consumer's snapshots. Compared by the caller
// with the next id this cluster will hand out, read after this statement.
std::string StoredXidsSql(const std::string& table) {
  return R"sql(
SELECT (SELECT e.txid FROM )sql" +
         table + R"sql( e ORDER BY e.txid DESC, e.id DESC LIMIT 1) AS newest_txid,
       (SELECT max(GREATEST(pg_catalog.pg_snapshot_xmax(c.done_snapshot),
                            pg_catalog.pg_snapshot_xmax(c.window_end)))
          FROM pgq.stream_consumers c WHERE c.stream_id = $1) AS newest_xmax)sql";
}

}  // namespace

StreamStatements::StreamStatements(int32 stream_id)
    : read_window(ReadWindowSql(pg::segments::TableName(kRoot, stream_id)),
                  {PG_SNAPSHOTOID, PG_SNAPSHOTOID, XID8OID, INT8OID, XID8OID, INT8OID, INT4OID,
                   XID8OID, INT8OID, INT8OID}),
      segment_finished(SegmentFinishedSql(pg::segments::TableName(kRoot, stream_id)),
                       {INT4OID, INT2OID}),
      consumer_stats(ConsumerStatsSql(pg::segments::TableName(kRoot, stream_id)),
                     {INT4OID, INT8OID}),
      stored_xids(StoredXidsSql(pg::segments::TableName(kRoot, stream_id)), {INT4OID}),
      rebase_consumers(RebaseConsumersSql(pg::segments::TableName(kRoot, stream_id)),
                       {INT4OID, XID8OID}),
      rebase_events("UPDATE " + pg::segments::TableName(kRoot, stream_id) + " SET txid = $1",
                    {XID8OID}) {}

StreamStatements& StatementsOf(int32 stream_id) {
  if (prepared == nullptr) prepared = new std::map<int32, std::unique_ptr<StreamStatements>>();
  auto found = prepared->find(stream_id);
  if (found == prepared->end()) {
    found = prepared->emplace(stream_id, std::make_unique<StreamStatements>(stream_id)).first;
  }
  return *found->second;
}

std::vector<int32> StreamIds(pg::SpiSession& spi) {
  pg::Params none;
  pg::Result rows = spi.Execute(stream_ids, none);
  std::vector<int32> ids;
  const int id = rows.empty() ? 0 : rows.ColumnNumber("stream_id");
  for (uint64 row = 0; row < rows.size(); ++row) ids.push_back(rows.Int32(row, id));
  rows.Free();
  return ids;
}

}  // namespace detail

namespace {

// Whether the stream holds a transaction id this cluster has not handed out
// yet: then it came from a dump of another cluster (ADR 0020, "Restore").
//
// INVARIANT: the next id is read after the statement has returned. Every
// event's txid was assigned before the append that wrote it, and every
// snapshot's xmax is at most the next id at the time it was taken, so any
// value this cluster produced -- the caller's own uncommitted event and
// another producer's in-flight one included -- is below the next id read
// afterwards (an xmax at most equal to it). Only ids from elsewhere are not.
// (Comparing with the snapshot's xmax, as 2.0 did, took the caller's own
// event for one from elsewhere: issue 30, S1.)
bool NeedsRebase(pg::SpiSession& spi, int32 stream_id) {
  pg::Params params;
  params.Set(0, Int32GetDatum(stream_id));
  pg::Result row = spi.Execute(detail::StatementsOf(stream_id).stored_xids.get(), params, 1);
  bool no_event = true;
  bool no_xmax = true;
  const Datum newest_txid = row.Value(0, "newest_txid", &no_event);
  const Datum newest_xmax = row.Value(0, "newest_xmax", &no_xmax);
  const FullTransactionId stored_txid =
      no_event ? InvalidFullTransactionId : DatumGetFullTransactionId(newest_txid);
  const FullTransactionId stored_xmax =
      no_xmax ? InvalidFullTransactionId : DatumGetFullTransactionId(newest_xmax);
  row.Free();
  const FullTransactionId next = pg::Guard([] { return ReadNextFullTransactionId(); });
  return (!no_event && FullTransactionIdFollowsOrEquals(stored_txid, next)) ||
         (!no_xmax && FullTransactionIdFollows(stored_xmax, next));
}

// A database restored from a dump of another cluster holds transaction ids
// of that cluster, which mean nothing here: new appends would get smaller
// ids and look finished to every consumer. So, once, under the stream's
// lock: each consumer is placed just before its first unfinished event (in
// id order; the events it finished after that one come again: at-least-once
// across a restore), then every event takes this transaction's id (ADR 0020).
void Rebase(pg::SpiSession& spi, int32 stream_id) {
  pg::Params lock;
  lock.Set(0, Int32GetDatum(stream_id));
  (void)spi.Execute(lock_stream, lock);
  if (!NeedsRebase(spi, stream_id)) return;  // another session did it
  const Datum txid = pg::Guard([] { return FullTransactionIdGetDatum(GetTopFullTransactionId()); });
  detail::StreamStatements& statements = detail::StatementsOf(stream_id);
  detail::RebaseConsumers(spi, stream_id, txid);
  pg::Params events;
  events.Set(0, txid);
  (void)spi.Execute(statements.rebase_events.get(), events);
}

}  // namespace

std::optional<Stream> Find(pg::SpiSession& spi, std::string_view name) {
  pg::invalidation::Accept();
  for (const CachedStream& entry : Cache()) {
    if (entry.name == name) return entry.stream;
  }
  const uint64 begun = cached.Begin();
  std::optional<Stream> stream = Load(spi, name);
  // Checked once per load of the cache (after an invalidation of it):
  // cheap, three index probes and the stream's consumers.
  if (stream && NeedsRebase(spi, stream->id)) Rebase(spi, stream->id);
  if (!stream) return stream;
  stream->epoch = begun;
  // An invalidation processed while loading (the statements accept them)
  // may be about this stream: not remembered then, read again next time.
  if (begun == cached.Current()) Cache().push_back(CachedStream{std::string(name), *stream});
  return stream;
}

std::string NameOf(pg::SpiSession& spi, int32 stream_id) {
  pg::Params params;
  params.Set(0, Int32GetDatum(stream_id));
  pg::Result row = spi.Execute(name_of, params, 1);
  std::string name = row.empty() ? std::string() : row.Text(0, "name");
  row.Free();
  return name;
}

bool Create(pg::SpiSession& spi, std::string_view name, Oid owner, const Interval& rotation,
            TimestampTz now) {
  pg::Params params;
  params.Set(0, pg::TextDatum(name))
      .Set(1, ObjectIdGetDatum(owner))
      .Set(2, IntervalPGetDatum(&rotation));
  pg::Result row = spi.Execute(insert_stream, params, 1);
  if (row.empty()) return false;
  const int32 id = row.Int32(0, "stream_id");
  row.Free();
  pg::segments::CreateRing(spi, kRoot, id, kSegments, "(txid, id)", now);
  pg::invalidation::Announce(pg::invalidation::kStreams);
  return true;
}

void SetRotation(pg::SpiSession& spi, int32 stream_id, const Interval& rotation) {
  pg::Params params;
  params.Set(0, Int32GetDatum(stream_id)).Set(1, IntervalPGetDatum(&rotation));
  (void)spi.Execute(set_rotation, params);
  pg::invalidation::Announce(pg::invalidation::kStreams);
}

void Drop(pg::SpiSession& spi, const Stream& stream, TimestampTz now) {
  pg::segments::DropRing(spi, kRoot, stream.id, now);
  pg::Params params;
  params.Set(0, Int32GetDatum(stream.id));
  (void)spi.Execute(delete_stream, params);
  pg::invalidation::Announce(pg::invalidation::kStreams);
}

bool Append(pg::SpiSession& spi, const Stream& found, const Datum* payloads, int count, int64* ids,
            bool missing_ok, Datum trace_context) {
  pg::RequireInsertAllowed();
  // The segment to write, locked: the lock processes the invalidations
  // that arrived since the stream was found (a rotation, a drop), and a drop
  // waits for it from then on. When one arrived, the stream is read again,
  // and must be the same stream: one dropped meanwhile (perhaps created
  // again under its name, a stream whose rights the caller did not check)
  // is missing. A writer that is still a rotation behind writes a sealed
  // segment, which is safe (pg/segments.h), only less tidy.
  const Stream* stream = &found;
  std::optional<Stream> again;
  for (int attempt = 0;; ++attempt) {
    const Oid leaf = stream->ring.leaves[stream->ring.current];
    pg::Guard([leaf] { LockRelationOid(leaf, RowExclusiveLock); });
    if (stream->epoch == cached.Current() || attempt == 3) break;
    again = Find(spi, found.name);
    if (!again || again->id != found.id) {
      if (missing_ok) return false;
      pg::Raise(ERRCODE_UNDEFINED_OBJECT, "stream \"" + found.name + "\" does not exist");
    }
    stream = &*again;
  }
  const Oid sequence = EventIdSequence();
  const Datum txid = pg::Guard([] { return FullTransactionIdGetDatum(GetTopFullTransactionId()); });
  const TimestampTz appended_at = GetCurrentTransactionStartTimestamp();
  pg::RowInserter inserter(stream->ring.leaves[stream->ring.current]);
  // pgq.stream_events' columns (a leaf made before 3.1 has been given the
  // seventh by the update: columns are only ever added, ADR 0030).
  Datum values[7];
  bool nulls[7] = {false, false, false, false, false, false, trace_context == 0};
  values[6] = trace_context;
  values[0] = Int32GetDatum(stream->id);
  values[1] = Int16GetDatum(static_cast<int16>(stream->ring.current));
  values[2] = txid;
  values[4] = TimestampTzGetDatum(appended_at);
  for (int i = 0; i < count; ++i) {
    ids[i] = pg::Guard([sequence] { return nextval_internal(sequence, false); });
    values[3] = Int64GetDatum(ids[i]);
    values[5] = payloads[i];
    inserter.Insert(values, nulls);
  }
  pg::ledger::NoteAppended(stream->id);
  return true;
}

std::vector<StreamSize> Sizes(pg::SpiSession& spi) {
  pg::Params none;
  pg::Result rows = spi.Execute(stream_sizes, none);
  std::vector<StreamSize> sizes;
  if (!rows.empty()) {
    const int name = rows.ColumnNumber("name"), bytes = rows.ColumnNumber("bytes"),
              events = rows.ColumnNumber("events");
    for (uint64 row = 0; row < rows.size(); ++row) {
      sizes.push_back(
          StreamSize{rows.Text(row, name), rows.Int64(row, bytes), rows.Int64(row, events)});
    }
  }
  rows.Free();
  return sizes;
}

pg::Result RingSegments(pg::SpiSession& spi, std::optional<int32> stream_id) {
  pg::Params params;
  params.SetOptional(0, !stream_id, Int32GetDatum(stream_id.value_or(0)));
  return spi.Execute(ring_segments, params);
}

MaintainCounts Maintain(pg::SpiSession& spi, TimestampTz now) {
  // A reader or writer in the way of a truncation is waited for this long;
  // the next pass tries again.
  constexpr int kLockWaitMs = 20;
  MaintainCounts counts;
  pg::Params none;
  pg::Result rows = spi.Execute(streams_to_maintain, none);
  struct Due {
    int32 id;
    int64 rotation_us;
    TimestampTz rotated_at;
    bool sealed;
    bool next_empty;
  };
  std::vector<Due> due;
  const int id = rows.empty() ? 0 : rows.ColumnNumber("stream_id");
  const int rotation_column = rows.empty() ? 0 : rows.ColumnNumber("rotation");
  const int rotated_at = rows.empty() ? 0 : rows.ColumnNumber("rotated_at");
  const int sealed = rows.empty() ? 0 : rows.ColumnNumber("sealed");
  const int next_empty = rows.empty() ? 0 : rows.ColumnNumber("next_empty");
  for (uint64 row = 0; row < rows.size(); ++row) {
    bool is_null = false;
    const Interval* rotation = DatumGetIntervalP(rows.Value(row, rotation_column, &is_null));
    due.push_back(Due{rows.Int32(row, id), pg::IntervalMicros(rotation, "rotation"),
                      DatumGetTimestampTz(rows.Value(row, rotated_at, &is_null)),
                      rows.Bool(row, sealed), rows.Bool(row, next_empty)});
  }
  rows.Free();
  for (const Due& stream : due) {
    // Truncated first, turned after: a segment sealed by this transaction
    // is still written to by the appenders that read the ring before it.
    if (stream.sealed) {
      detail::StreamStatements& statements = detail::StatementsOf(stream.id);
      counts.truncated +=
          pg::segments::Reclaim(spi, kRoot, stream.id, kLockWaitMs, now, [&](Oid, int segment) {
            pg::Params params;
            params.Set(0, Int32GetDatum(stream.id))
                .Set(1, Int16GetDatum(static_cast<int16>(segment)));
            pg::Result finished =
                spi.ExecuteSeeingLatest(statements.segment_finished.get(), params);
            const bool yes = finished.Bool(0, "finished");
            finished.Free();
            return yes;
          });
    }
    // A reclaim above may have emptied the next segment; Rotate reads the
    // ledger again under the ring's lock.
    if (now - stream.rotated_at >= stream.rotation_us && (stream.next_empty || stream.sealed) &&
        pg::segments::Rotate(spi, kRoot, stream.id, stream.rotation_us, now)) {
      ++counts.rotated;
    }
  }
  return counts;
}

namespace {

pg::Statement lock_stream_owner = {
    "SELECT stream_id, owner::oid AS owner, owner::text AS owner_name FROM pgq.streams"
    " WHERE name = $1 FOR KEY SHARE",
    1,
    {TEXTOID},
    nullptr};

pg::Statement insert_grant = {
    "INSERT INTO pgq.stream_grants (role, stream_id, privilege) VALUES ($1, $2, $3)"
    " ON CONFLICT DO NOTHING",
    3,
    {REGROLEOID, INT4OID, TEXTOID},
    nullptr};

pg::Statement delete_grant = {
    "DELETE FROM pgq.stream_grants WHERE role = $1 AND stream_id = $2 AND privilege = $3",
    3,
    {REGROLEOID, INT4OID, TEXTOID},
    nullptr};

pg::Statement drop_orphan_grants = {
    "DELETE FROM pgq.stream_grants g"
    " WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.oid = g.role::oid)",
    0,
    {},
    nullptr};

pg::Statement load_holders = {
    "SELECT g.role::oid AS role, g.stream_id,"
    "       CASE g.privilege WHEN 'produce' THEN 1 WHEN 'consume' THEN 2 ELSE 4 END AS rights"
    "  FROM pgq.stream_grants g"
    " UNION ALL "
    "SELECT s.owner::oid, s.stream_id, 7 FROM pgq.streams s",
    0,
    {},
    nullptr};

bool ChangeGrant(pg::SpiSession& spi, pg::Statement& statement, Oid role, int32 stream_id,
                 std::string_view privilege) {
  pg::Params params;
  params.Set(0, ObjectIdGetDatum(role))
      .Set(1, Int32GetDatum(stream_id))
      .Set(2, pg::TextDatum(privilege));
  return spi.Execute(statement, params).size() == 1;
}

}  // namespace

std::optional<StreamOwner> LockOwner(pg::SpiSession& spi, std::string_view name) {
  pg::Params lookup;
  lookup.Set(0, pg::TextDatum(name));
  const pg::Result found = spi.Execute(lock_stream_owner, lookup, 1);
  if (found.empty()) return std::nullopt;
  bool is_null = false;
  return StreamOwner{found.Int32(0, "stream_id"),
                     DatumGetObjectId(found.Value(0, "owner", &is_null)),
                     found.Text(0, "owner_name")};
}

bool InsertGrant(pg::SpiSession& spi, Oid role, int32 stream_id, std::string_view privilege) {
  return ChangeGrant(spi, insert_grant, role, stream_id, privilege);
}

bool DeleteGrant(pg::SpiSession& spi, Oid role, int32 stream_id, std::string_view privilege) {
  return ChangeGrant(spi, delete_grant, role, stream_id, privilege);
}

void DropOrphanGrants(pg::SpiSession& spi) {
  pg::Params none;
  spi.Execute(drop_orphan_grants, none);
}

std::vector<core::RightsHolder> RightsHolders(pg::SpiSession& spi) {
  pg::Params none;
  pg::Result rows = spi.Execute(load_holders, none);
  return HoldersOfRows(rows, "stream_id");
}

}  // namespace pgq::store::streams
