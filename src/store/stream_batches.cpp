// Stream consumers: registration, batches cut by snapshots, finishing.
//
// A consumer's row holds its position (store/streams.h, ADR 0020). next_batch
// locks the row, then reads with a new statement (a snapshot taken after the
// lock, so a window never ends before the one a concurrent call just
// stored), so two calls for one consumer are serialised and the second gets
// the batch the first opened.
#include <algorithm>

#include "pg/args.h"
#include "store/stream_statements.h"

extern "C" {
#include "utils/datum.h"
#include "utils/xid8.h"
}

namespace pgq::store::streams {

namespace {

// Registration holds the ring's row while it takes the consumer's first
// snapshot: a truncation (which locks the row FOR UPDATE) either sees the
// new consumer or ran before its snapshot was taken. FOR UPDATE, not FOR
// SHARE (2.0): two registrations are serialised, so the count of consumers
// checked against pgq.max_consumers_per_stream is exact.
pg::Statement lock_ring = {
    "SELECT 1 FROM pgq.rings WHERE ring_id = $1 FOR UPDATE", 1, {INT4OID}, nullptr};

// The stream's consumers and whether `$2` is one of them.
pg::Statement count_consumers = {R"sql(
SELECT count(*) AS consumers,
       COALESCE(bool_or(name OPERATOR(pg_catalog.=) $2), false) AS registered
  FROM pgq.stream_consumers WHERE stream_id = $1)sql",
                                 2,
                                 {INT4OID, TEXTOID},
                                 nullptr};

pg::Statement register_consumer = {R"sql(
INSERT INTO pgq.stream_consumers (consumer_id, stream_id, name, done_snapshot, done_at)
VALUES (pg_catalog.nextval('pgq.stream_consumer_id_seq')::int4, $1, $2,
        pg_catalog.pg_current_snapshot(), pg_catalog.clock_timestamp())
ON CONFLICT (stream_id, name) DO NOTHING
RETURNING consumer_id)sql",
                                   2,
                                   {INT4OID, TEXTOID},
                                   nullptr};

pg::Statement unregister_consumer = {
    "DELETE FROM pgq.stream_consumers WHERE stream_id = $1 AND name = $2 RETURNING consumer_id",
    2,
    {INT4OID, TEXTOID},
    nullptr};

// The consumer's id, its row held (FOR KEY SHARE) until the end of the
// transaction: acquire_consumer's guard names a consumer that exists.
pg::Statement find_consumer = {
    "SELECT consumer_id FROM pgq.stream_consumers WHERE stream_id = $1 AND name = $2"
    "   FOR KEY SHARE",
    2,
    {INT4OID, TEXTOID},
    nullptr};

pg::Statement lock_consumer = {R"sql(
SELECT consumer_id, done_snapshot, window_end, window_end_at, cursor_txid, cursor_id, batch_no,
       batch_open, batch_end_txid, batch_end_id, batch_events,
       pg_catalog.pg_snapshot_xmax(done_snapshot) AS done_xmax,
       pg_catalog.pg_snapshot_xmax(window_end) AS window_xmax
  FROM pgq.stream_consumers
 WHERE stream_id = $1 AND name = $2
   FOR UPDATE)sql",
                               2,
                               {INT4OID, TEXTOID},
                               nullptr};

pg::Statement open_batch = {
    R"sql(
UPDATE pgq.stream_consumers
   SET window_end = $2, window_end_at = $3, batch_no = batch_no + 1, batch_open = true,
       batch_end_txid = $4, batch_end_id = $5, batch_events = $6, batch_ends_window = $7,
       batch_opened_at = pg_catalog.clock_timestamp()
 WHERE consumer_id = $1
RETURNING batch_no)sql",
    7,
    {INT4OID, PG_SNAPSHOTOID, TIMESTAMPTZOID, XID8OID, INT8OID, INT4OID, BOOLOID},
    nullptr};

// The window was read to its end by an earlier batch that was exactly
// max_events long: its end becomes the consumer's done snapshot.
pg::Statement close_window = {R"sql(
UPDATE pgq.stream_consumers
   SET done_snapshot = window_end, done_at = window_end_at, window_end = NULL,
       window_end_at = NULL, cursor_txid = '0', cursor_id = 0
 WHERE consumer_id = $1)sql",
                              1,
                              {INT4OID},
                              nullptr};

pg::Statement stream_of_consumer = {
    "SELECT stream_id FROM pgq.stream_consumers WHERE consumer_id = $1", 1, {INT4OID}, nullptr};

// Why a finish found nothing to finish.
pg::Statement batch_state = {
    "SELECT batch_no, batch_open FROM pgq.stream_consumers WHERE consumer_id = $1",
    1,
    {INT4OID},
    nullptr};

pg::Statement finish_batch = {R"sql(
UPDATE pgq.stream_consumers
   SET done_snapshot = CASE WHEN batch_ends_window THEN window_end ELSE done_snapshot END,
       done_at = CASE WHEN batch_ends_window THEN window_end_at ELSE done_at END,
       cursor_txid = CASE WHEN batch_ends_window THEN '0'::xid8 ELSE batch_end_txid END,
       cursor_id = CASE WHEN batch_ends_window THEN 0 ELSE batch_end_id END,
       window_end = CASE WHEN batch_ends_window THEN NULL ELSE window_end END,
       window_end_at = CASE WHEN batch_ends_window THEN NULL ELSE window_end_at END,
       batch_open = false, finished_batches = finished_batches + 1,
       finished_events = finished_events + batch_events,
       last_finished_at = pg_catalog.clock_timestamp()
 WHERE consumer_id = $1 AND batch_open AND batch_no % 4294967296 = $2
RETURNING batch_events)sql",
                              2,
                              {INT4OID, INT8OID},
                              nullptr};

// How many consumers each stream has (streams with none are left out).
pg::Statement consumer_counts = {
    "SELECT stream_id, count(*) AS consumers FROM pgq.stream_consumers"
    " GROUP BY stream_id ORDER BY stream_id",
    0,
    {},
    nullptr};

constexpr uint64 kBatchNoMask = 0xffffffffu;

// The columns of a statement on the paths of next_batch and finish_batch,
// found by name on the first result in the backend and kept: they cannot
// move without the statement's text, which is fixed.
template <typename Columns>
const Columns& ColumnsOf(const pg::Result& rows) {
  static const Columns columns(rows);
  return columns;
}

// lock_consumer's.
struct ConsumerColumns {
  explicit ConsumerColumns(const pg::Result& rows)
      : consumer_id(rows.ColumnNumber("consumer_id")),
        done_snapshot(rows.ColumnNumber("done_snapshot")),
        window_end(rows.ColumnNumber("window_end")),
        window_end_at(rows.ColumnNumber("window_end_at")),
        cursor_txid(rows.ColumnNumber("cursor_txid")),
        cursor_id(rows.ColumnNumber("cursor_id")),
        batch_no(rows.ColumnNumber("batch_no")),
        batch_open(rows.ColumnNumber("batch_open")),
        batch_end_txid(rows.ColumnNumber("batch_end_txid")),
        batch_end_id(rows.ColumnNumber("batch_end_id")),
        batch_events(rows.ColumnNumber("batch_events")),
        done_xmax(rows.ColumnNumber("done_xmax")),
        window_xmax(rows.ColumnNumber("window_xmax")) {}
  int consumer_id, done_snapshot, window_end, window_end_at, cursor_txid, cursor_id, batch_no,
      batch_open, batch_end_txid, batch_end_id, batch_events, done_xmax, window_xmax;
};

// read_window's (stream_statements.h; one shape for every stream).
struct WindowColumns {
  explicit WindowColumns(const pg::Result& rows)
      : txid(rows.ColumnNumber("txid")),
        id(rows.ColumnNumber("id")),
        appended_at(rows.ColumnNumber("appended_at")),
        payload(rows.ColumnNumber("payload")),
        trace_context(rows.ColumnNumber("trace_context")),
        cut(rows.ColumnNumber("cut")),
        cut_at(rows.ColumnNumber("cut_at")),
        bytes_through(rows.ColumnNumber("bytes_through")) {}
  int txid, id, appended_at, payload, trace_context, cut, cut_at, bytes_through;
};

// A one-column result's.
struct BatchNoColumn {
  explicit BatchNoColumn(const pg::Result& rows) : batch_no(rows.ColumnNumber("batch_no")) {}
  int batch_no;
};
struct BatchEventsColumn {
  explicit BatchEventsColumn(const pg::Result& rows)
      : batch_events(rows.ColumnNumber("batch_events")) {}
  int batch_events;
};
struct StreamIdColumn {
  explicit StreamIdColumn(const pg::Result& rows) : stream_id(rows.ColumnNumber("stream_id")) {}
  int stream_id;
};

int64 BatchId(int32 consumer_id, int64 batch_no) {
  return static_cast<int64>((static_cast<uint64>(consumer_id) << 32) |
                            (static_cast<uint64>(batch_no) & kBatchNoMask));
}

// A position in (txid, id) order.
struct Key {
  uint64 txid;
  int64 id;
  bool operator<(const Key& other) const {
    return txid != other.txid ? txid < other.txid : id < other.id;
  }
};

Datum TxidDatum(uint64 txid) { return FullTransactionIdGetDatum(FullTransactionIdFromU64(txid)); }
uint64 TxidOf(Datum value) { return U64FromFullTransactionId(DatumGetFullTransactionId(value)); }

// The window (from, to]'s events after `cursor` up to `last`, at most
// `limit`, cut after the one whose payload takes them to `max_bytes`,
// copied into `memory`; the key of the last one in *end, the payload bytes
// read in *bytes. `to` 0: the window is cut now, and its end (and the time)
// are copied into `memory` as *cut and *cut_at when there are events.
std::vector<Event> ReadWindow(pg::SpiSession& spi, int32 stream_id, Datum from, uint64 from_xmax,
                              Datum to, Key cursor, Key last, int32 limit, int64 max_bytes,
                              MemoryContext memory, Key* end, int64* bytes, Datum* cut = nullptr,
                              Datum* cut_at = nullptr) {
  // The range part starts at the later of the cursor and the first
  // transaction the from snapshot did not know (ids start at 1).
  const Key start = std::max(cursor, Key{from_xmax, 0});
  pg::Params params;
  params.Set(0, from)
      .SetOptional(1, to == 0, to)
      .Set(2, TxidDatum(start.txid))
      .Set(3, Int64GetDatum(start.id))
      .Set(4, TxidDatum(last.txid))
      .Set(5, Int64GetDatum(last.id))
      .Set(6, Int32GetDatum(limit))
      .Set(7, TxidDatum(cursor.txid))
      .Set(8, Int64GetDatum(cursor.id))
      .Set(9, Int64GetDatum(max_bytes));
  pg::Result rows = spi.Execute(detail::StatementsOf(stream_id).read_window.get(), params);
  std::vector<Event> events;
  if (rows.empty()) {
    rows.Free();
    return events;
  }
  const WindowColumns& c = ColumnsOf<WindowColumns>(rows);
  events.reserve(rows.size());
  for (uint64 row = 0; row < rows.size(); ++row) {
    bool is_null = false;
    const Datum payload = rows.Value(row, c.payload, &is_null);
    bool untraced = false;
    const Datum trace_context = rows.Value(row, c.trace_context, &untraced);
    Event event;
    event.id = rows.Int64(row, c.id);
    event.appended_at = DatumGetTimestampTz(rows.Value(row, c.appended_at, &is_null));
    event.payload = pg::Guard([&] {
      MemoryContext old = MemoryContextSwitchTo(memory);
      const Datum copy = datumCopy(payload, false, -1);
      MemoryContextSwitchTo(old);
      return copy;
    });
    event.trace_context = untraced ? 0 : pg::Guard([&] {
      MemoryContext old = MemoryContextSwitchTo(memory);
      const Datum copy = datumCopy(trace_context, false, -1);
      MemoryContextSwitchTo(old);
      return copy;
    });
    events.push_back(event);
    if (row + 1 == rows.size()) {
      *end = Key{TxidOf(rows.Value(row, c.txid, &is_null)), event.id};
      *bytes = rows.Int64(row, c.bytes_through);
    }
  }
  if (cut != nullptr && !events.empty()) {
    bool is_null = false;
    const Datum snapshot = rows.Value(0, c.cut, &is_null);
    *cut = pg::Guard([&] {
      MemoryContext old = MemoryContextSwitchTo(memory);
      const Datum copy = datumCopy(snapshot, false, -1);
      MemoryContextSwitchTo(old);
      return copy;
    });
    *cut_at = rows.Value(0, c.cut_at, &is_null);
  }
  rows.Free();
  return events;
}

[[noreturn]] void RaiseNoConsumer(const Stream& stream, std::string_view consumer) {
  pg::Raise(
      ERRCODE_UNDEFINED_OBJECT,
      "consumer \"" + std::string(consumer) + "\" of stream \"" + stream.name + "\" does not exist",
      {}, "Register it with pgq.register_consumer(stream, '" + std::string(consumer) + "').");
}

}  // namespace

bool Register(pg::SpiSession& spi, const Stream& stream, std::string_view consumer,
              int max_consumers) {
  pg::Params ring;
  ring.Set(0, Int32GetDatum(stream.id));
  (void)spi.Execute(lock_ring, ring);
  pg::Params params;
  params.Set(0, Int32GetDatum(stream.id)).Set(1, pg::TextDatum(consumer));
  // Seeing what committed while we waited for the ring's row, even in a
  // REPEATABLE READ transaction: the count is exact.
  pg::Result counted = spi.ExecuteSeeingLatest(count_consumers, params, 1);
  const int64 consumers = counted.Int64(0, "consumers");
  const bool registered = counted.Bool(0, "registered");
  counted.Free();
  // (A name registered already goes on to the insert, which does nothing.)
  if (!registered && consumers >= max_consumers) {
    pg::Raise(ERRCODE_PROGRAM_LIMIT_EXCEEDED,
              "stream \"" + stream.name + "\" has too many consumers",
              "pgq.max_consumers_per_stream is " + std::to_string(max_consumers) +
                  "; the stream has " + std::to_string(consumers) + " registered.",
              "Unregister the consumers no longer read with pgq.unregister_consumer, or ask a "
              "superuser to raise pgq.max_consumers_per_stream.");
  }
  return !spi.Execute(register_consumer, params).empty();
}

bool Unregister(pg::SpiSession& spi, const Stream& stream, std::string_view consumer) {
  pg::Params params;
  params.Set(0, Int32GetDatum(stream.id)).Set(1, pg::TextDatum(consumer));
  return !spi.Execute(unregister_consumer, params).empty();
}

int32 ConsumerId(pg::SpiSession& spi, const Stream& stream, std::string_view consumer) {
  pg::Params params;
  params.Set(0, Int32GetDatum(stream.id)).Set(1, pg::TextDatum(consumer));
  const pg::Result found = spi.Execute(find_consumer, params, 1);
  if (found.empty()) RaiseNoConsumer(stream, consumer);
  return found.Int32(0, "consumer_id");
}

Batch NextBatch(pg::SpiSession& spi, const Stream& stream, std::string_view consumer,
                int32 max_events, int64 max_bytes, MemoryContext memory) {
  pg::Params params;
  params.Set(0, Int32GetDatum(stream.id)).Set(1, pg::TextDatum(consumer));
  pg::Result state = spi.Execute(lock_consumer, params, 1);
  if (state.empty()) RaiseNoConsumer(stream, consumer);
  const ConsumerColumns& c = ColumnsOf<ConsumerColumns>(state);
  bool is_null = false;
  const int32 consumer_id = state.Int32(0, c.consumer_id);
  Datum from = state.Value(0, c.done_snapshot, &is_null);
  bool window_is_null = false;
  Datum window_end = state.Value(0, c.window_end, &window_is_null);
  Datum window_end_at = state.Value(0, c.window_end_at, &is_null);
  Key cursor{TxidOf(state.Value(0, c.cursor_txid, &is_null)), state.Int64(0, c.cursor_id)};
  const int64 batch_no = state.Int64(0, c.batch_no);
  uint64 from_xmax = TxidOf(state.Value(0, c.done_xmax, &is_null));
  const uint64 window_xmax = window_is_null ? 0 : TxidOf(state.Value(0, c.window_xmax, &is_null));

  Batch batch;
  const Key no_end{UINT64_MAX, INT64_MAX};
  if (state.Bool(0, c.batch_open)) {
    // The open batch again: the same window, cursor and end, the same
    // events (whatever pgq.max_batch_bytes is now: the end says it all).
    const Key last{TxidOf(state.Value(0, c.batch_end_txid, &is_null)),
                   state.Int64(0, c.batch_end_id)};
    Key end{};
    int64 bytes = 0;
    batch.events =
        ReadWindow(spi, stream.id, from, from_xmax, window_end, cursor, last,
                   std::max(state.Int32(0, c.batch_events), 1), INT64_MAX, memory, &end, &bytes);
    batch.batch_id = BatchId(consumer_id, batch_no);
    return batch;
  }
  for (int round = 0; round < 2; ++round) {
    const bool new_window = window_is_null;
    Key end{};
    int64 bytes = 0;
    Datum cut = 0;
    Datum cut_at = 0;
    // INVARIANT: a new window is cut by this statement, so at a snapshot
    // taken after the row lock (the statement above).
    std::vector<Event> events =
        ReadWindow(spi, stream.id, from, from_xmax, new_window ? 0 : window_end, cursor, no_end,
                   max_events, max_bytes, memory, &end, &bytes, &cut, &cut_at);
    if (!events.empty()) {
      // Fewer than asked and not cut by size: the window's last events. (A
      // batch cut by size, or exactly max_events long, may be: the next
      // call finds the window empty and closes it.)
      const bool ends_window = static_cast<int32>(events.size()) < max_events && bytes < max_bytes;
      pg::Params open;
      open.Set(0, Int32GetDatum(consumer_id))
          .Set(1, new_window ? cut : window_end)
          .Set(2, new_window ? cut_at : window_end_at)
          .Set(3, TxidDatum(end.txid))
          .Set(4, Int64GetDatum(end.id))
          .Set(5, Int32GetDatum(static_cast<int32>(events.size())))
          .Set(6, BoolGetDatum(ends_window));
      pg::Result opened = spi.Execute(open_batch, open, 1);
      batch.batch_id =
          BatchId(consumer_id, opened.Int64(0, ColumnsOf<BatchNoColumn>(opened).batch_no));
      opened.Free();
      batch.events = std::move(events);
      return batch;
    }
    // Nothing in a window just cut: nothing to read, and nothing written
    // (an idle consumer polling costs no write).
    if (new_window) break;
    // The stored window was read to its end: its end is the new start.
    pg::Params close;
    close.Set(0, Int32GetDatum(consumer_id));
    (void)spi.Execute(close_window, close);
    from = window_end;
    from_xmax = window_xmax;
    cursor = Key{0, 0};
    window_is_null = true;
  }
  return batch;
}

int32 StreamOfBatch(pg::SpiSession& spi, int64 batch_id) {
  if (batch_id <= 0) return 0;
  pg::Params params;
  params.Set(0, Int32GetDatum(static_cast<int32>(static_cast<uint64>(batch_id) >> 32)));
  pg::Result row = spi.Execute(stream_of_consumer, params, 1);
  const int32 stream_id = row.empty() ? 0 : row.Int32(0, ColumnsOf<StreamIdColumn>(row).stream_id);
  row.Free();
  return stream_id;
}

int32 FinishBatch(pg::SpiSession& spi, int64 batch_id) {
  const auto consumer_id = static_cast<int32>(static_cast<uint64>(batch_id) >> 32);
  const uint64 batch_no = static_cast<uint64>(batch_id) & kBatchNoMask;
  pg::Params params;
  params.Set(0, Int32GetDatum(consumer_id)).Set(1, Int64GetDatum(static_cast<int64>(batch_no)));
  pg::Result finished = spi.Execute(finish_batch, params, 1);
  if (!finished.empty()) {
    const int32 events = finished.Int32(0, ColumnsOf<BatchEventsColumn>(finished).batch_events);
    finished.Free();
    return events;
  }
  // Not the open batch: say why, as of now.
  pg::Params consumer;
  consumer.Set(0, Int32GetDatum(consumer_id));
  pg::Result state = spi.Execute(batch_state, consumer, 1);
  const std::string shown = std::to_string(batch_id);
  if (state.empty()) {
    pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE, "batch " + shown + " does not exist",
              "Its consumer is not registered.");
  }
  const uint64 current = static_cast<uint64>(state.Int64(0, "batch_no")) & kBatchNoMask;
  const bool open = state.Bool(0, "batch_open");
  state.Free();
  // Batch numbers start at 1: 0 was never given.
  const bool earlier = batch_no != 0 && (batch_no < current || (batch_no == current && !open));
  if (earlier) {
    pg::Raise(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, "batch " + shown + " is already finished",
              "Its consumer has moved past it; finishing a batch twice has no effect on the "
              "position and is refused.");
  }
  pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE, "batch " + shown + " does not exist",
            "Its consumer has not been given it.");
}

namespace detail {

// The consumers' part of the rebase after a restore (streams.cpp, Rebase).
std::string RebaseConsumersSql(const std::string& table) {
  return R"sql(
UPDATE pgq.stream_consumers c
   SET cursor_id = COALESCE(
         (SELECT min(e.id) - 1 FROM )sql" +
         table + R"sql( e
           WHERE NOT pg_catalog.pg_visible_in_snapshot(e.txid, c.done_snapshot)
             AND NOT (c.window_end IS NOT NULL
                      AND pg_catalog.pg_visible_in_snapshot(e.txid, c.window_end)
                      AND (e.txid, e.id) <= (c.cursor_txid, c.cursor_id))),
         (SELECT max(e.id) FROM )sql" +
         table + R"sql( e), 0),
       cursor_txid = $2,
       done_snapshot = ($2::text || ':' || $2::text || ':')::pg_catalog.pg_snapshot,
       done_at = pg_catalog.clock_timestamp(), window_end = NULL, window_end_at = NULL,
       batch_open = false
 WHERE c.stream_id = $1)sql";
}

void RebaseConsumers(pg::SpiSession& spi, int32 stream_id, Datum txid) {
  pg::Params consumers;
  consumers.Set(0, Int32GetDatum(stream_id)).Set(1, txid);
  (void)spi.Execute(StatementsOf(stream_id).rebase_consumers.get(), consumers);
}

std::vector<ConsumerCount> ConsumerCounts(pg::SpiSession& spi) {
  pg::Params none;
  pg::Result rows = spi.Execute(consumer_counts, none);
  std::vector<ConsumerCount> counts;
  for (uint64 row = 0; row < rows.size(); ++row) {
    counts.push_back(ConsumerCount{rows.Int32(row, "stream_id"), rows.Int64(row, "consumers")});
  }
  rows.Free();
  return counts;
}

void StatsOfStream(pg::SpiSession& spi, int32 stream_id, TimestampTz now, int64 count_limit,
                   std::vector<ConsumerStats>* out) {
  pg::Params params;
  params.Set(0, Int32GetDatum(stream_id)).Set(1, Int64GetDatum(count_limit + 1));
  pg::Result rows = spi.Execute(StatementsOf(stream_id).consumer_stats.get(), params);
  const int stream_column = rows.ColumnNumber("stream");
  const int consumer_column = rows.ColumnNumber("consumer");
  const int pending_column = rows.ColumnNumber("pending");
  const int oldest_column = rows.ColumnNumber("oldest");
  const int open_column = rows.ColumnNumber("batch_open");
  const int opened_column = rows.ColumnNumber("batch_opened_at");
  const int finished_column = rows.ColumnNumber("finished_events");
  const int last_column = rows.ColumnNumber("last_finished_at");
  for (uint64 row = 0; row < rows.size(); ++row) {
    ConsumerStats stats{};
    stats.stream = rows.Text(row, stream_column);
    stats.consumer = rows.Text(row, consumer_column);
    const int64 counted = rows.Int64(row, pending_column);
    stats.pending_capped = counted > count_limit;
    stats.pending = std::min(counted, count_limit);
    bool is_null = false;
    const Datum oldest = rows.Value(row, oldest_column, &is_null);
    stats.has_lag = true;
    stats.lag_us = is_null ? 0 : std::max<int64>(0, now - DatumGetTimestampTz(oldest));
    stats.batch_open = rows.Bool(row, open_column);
    const Datum opened = rows.Value(row, opened_column, &is_null);
    stats.has_batch_age = stats.batch_open && !is_null;
    if (stats.has_batch_age)
      stats.batch_age_us = std::max<int64>(0, now - DatumGetTimestampTz(opened));
    stats.finished_events = rows.Int64(row, finished_column);
    const Datum last = rows.Value(row, last_column, &is_null);
    stats.has_last_finished = !is_null;
    if (!is_null) stats.last_finished_at = DatumGetTimestampTz(last);
    out->push_back(std::move(stats));
  }
  rows.Free();
}

}  // namespace detail

}  // namespace pgq::store::streams
