// The streams store: the one owner of every statement on pgq.streams,
// pgq.stream_consumers and the stream event tables, and of the ledger notes
// an append needs at commit (its stream's waiting readers are woken). The
// SQL functions (src/api/streams.cpp, stream_batches.cpp) check arguments
// and rights; the maintenance pass calls Maintain; the store checks no right.
//
// Storage: a ring of segment tables per stream (pg/segments.h). Reading:
// batches cut by transaction snapshots (ADR 0020): a consumer's position is
// a snapshot `done` (every event of a transaction visible in it is
// finished), the end of its current window (a later snapshot) and a cursor
// in (txid, id) order inside the window. A window holds exactly the events of
// the transactions that committed between its two snapshots, so an event
// whose transaction commits late is in a later window, never skipped.
//
// Files: streams.cpp (catalog, cache, append, maintenance), stream_batches.cpp
// (consumers, next_batch, finish_batch, statistics).
#pragma once

#include <algorithm>
#include <optional>
#include <string_view>
#include <vector>

#include "core/rights.h"
#include "pg/segments.h"
#include "pg/spi.h"

namespace pgq::store::streams {

// The root table of the stream rings (pgq.stream_events).
inline constexpr const char* kRoot = "stream_events";
inline constexpr int kSegments = 3;

// A stream as the catalog and its ring's ledger say.
struct Stream {
  std::string name;
  int32 id = 0;
  Oid owner = InvalidOid;
  int64 rotation_us = 0;
  pg::segments::Ring ring;
  // The epoch of this backend's stream cache it was read at (Find): still
  // current while that has not moved (pg/invalidation.h).
  uint64 epoch = 0;
};

// The stream named `name` from this backend's cache, read on a miss;
// nullopt if there is none. Processes pending invalidations first, so a
// create, drop or rotation committed before this call is seen.
std::optional<Stream> Find(pg::SpiSession& spi, std::string_view name);

// The stream's name by id ("" if none), for messages.
std::string NameOf(pg::SpiSession& spi, int32 stream_id);

// Creates the stream, owned by `owner`; false if the name is taken.
bool Create(pg::SpiSession& spi, std::string_view name, Oid owner, const Interval& rotation,
            TimestampTz now);
void SetRotation(pg::SpiSession& spi, int32 stream_id, const Interval& rotation);
// Drops the stream, its events, consumers and grants.
void Drop(pg::SpiSession& spi, const Stream& stream, TimestampTz now);

// Appends events in order to `stream` (as Find returned it: the name is
// resolved once, by the caller, who checked its rights on it), in the
// current transaction; writes their ids to `ids` (one per payload). Readers
// of the stream are woken at commit. A stream dropped since it was found
// raises undefined_object, or with `missing_ok` (publish: a subscribed
// stream dropped meanwhile gets nothing, as a queue) returns false.
// `trace_context`: every event's (text, or 0: none).
bool Append(pg::SpiSession& spi, const Stream& stream, const Datum* payloads, int count, int64* ids,
            bool missing_ok = false, Datum trace_context = 0);

// Consumers ----------------------------------------------------------------

// Registers `consumer`, positioned after everything committed before this
// statement; false if it was registered. A stream that has `max_consumers`
// already refuses another with program_limit_exceeded.
bool Register(pg::SpiSession& spi, const Stream& stream, std::string_view consumer,
              int max_consumers);
bool Unregister(pg::SpiSession& spi, const Stream& stream, std::string_view consumer);

// The consumer's id, its row kept from being unregistered until the end of
// the transaction; raises undefined_object for an unknown consumer.
int32 ConsumerId(pg::SpiSession& spi, const Stream& stream, std::string_view consumer);

struct Event {
  int64 id;
  TimestampTz appended_at;
  Datum payload;        // in the caller's memory
  Datum trace_context;  // text in the caller's memory; 0: none (ADR 0030)
};

struct Batch {
  int64 batch_id = 0;  // 0: nothing to read
  std::vector<Event> events;
};

// The consumer's open batch, or a new one of up to `max_events` events,
// ended after the event whose payload takes the batch to `max_bytes` (as
// stored; at least one event); raises undefined_object for an unknown
// consumer. Events and payloads are copied into `memory`.
Batch NextBatch(pg::SpiSession& spi, const Stream& stream, std::string_view consumer,
                int32 max_events, int64 max_bytes, MemoryContext memory);

// The stream a batch id belongs to (0 if no consumer has it), so the caller
// can check its right first.
int32 StreamOfBatch(pg::SpiSession& spi, int64 batch_id);

// Moves the batch's consumer past it; the number of events it held. Raises
// 55000 when the batch was finished already, 22023 when it was never given.
int32 FinishBatch(pg::SpiSession& spi, int64 batch_id);

struct ConsumerStats {
  std::string stream;
  std::string consumer;
  bool has_lag;
  int64 lag_us;
  int64 pending;        // at most the limit this consumer was counted up to
  bool pending_capped;  // more than that: `pending` is that limit
  bool batch_open;
  bool has_batch_age;
  int64 batch_age_us;
  int64 finished_events;
  bool has_last_finished;
  TimestampTz last_finished_at;
};

// A look at every consumer counts at most this many times `count_limit`
// unfinished events in all (3.0, issue 31: a scrape costs O(consumers)
// with a small constant, not consumers x limit).
inline constexpr int64 kCountBudgetLimits = 30;
// But each consumer is counted up to this many at least.
inline constexpr int64 kMinConsumerCount = 10;

// The limit each of `consumers` consumers is counted up to in one look.
inline int64 ConsumerCountLimit(int64 count_limit, int64 consumers) {
  if (consumers <= kCountBudgetLimits) return count_limit;
  return std::max(std::min(count_limit, kMinConsumerCount),
                  count_limit * kCountBudgetLimits / consumers);
}

// Every consumer of the streams `visible(stream_id)` accepts, its
// unfinished events counted up to `count_limit`, or fewer when there are
// more than kCountBudgetLimits consumers (ConsumerCountLimit): the work of
// one look is bounded whatever the backlogs and however many consumers.
template <typename Visible>
std::vector<ConsumerStats> Stats(pg::SpiSession& spi, TimestampTz now, int64 count_limit,
                                 Visible&& visible);

struct StreamSize {
  std::string name;
  int64 bytes;   // the ring's tables: heap, indexes, TOAST
  int64 events;  // estimated (pg_class.reltuples), -1 when never counted
};
std::vector<StreamSize> Sizes(pg::SpiSession& spi);

// Rows of pgq.stream_segments (3.0), then a column stream_id: the ring and
// segments of stream `stream_id`, or of every stream; by name, segment.
inline constexpr int kRingSegmentsColumns = 12;
pg::Result RingSegments(pg::SpiSession& spi, std::optional<int32> stream_id);

// Rights (pgq.stream_grants) -------------------------------------------------

// The stream named `name`: its id and owner (by OID: owner::text quotes a
// name that needs it and is a bare number for a dropped role, so no text
// comparison may decide who owns it), its row locked (FOR KEY SHARE) until
// the end of the transaction so that it cannot be dropped meanwhile.
struct StreamOwner {
  int32 id;
  Oid owner;
  std::string owner_name;
};
std::optional<StreamOwner> LockOwner(pg::SpiSession& spi, std::string_view name);
// Grants `privilege` on stream `stream_id` (0: every stream) to `role`;
// false when it held it already.
bool InsertGrant(pg::SpiSession& spi, Oid role, int32 stream_id, std::string_view privilege);
// Revokes it; false when there was no such grant.
bool DeleteGrant(pg::SpiSession& spi, Oid role, int32 stream_id, std::string_view privilege);
// Deletes the grants of roles dropped since.
void DropOrphanGrants(pg::SpiSession& spi);
// Every holder of a right on a stream: the grants (stream 0: every stream)
// and each stream's owner with all three (RightsHolder::queue_id holds the
// stream's id).
std::vector<core::RightsHolder> RightsHolders(pg::SpiSession& spi);

// Maintenance ----------------------------------------------------------------

struct MaintainCounts {
  int rotated = 0;
  int truncated = 0;
};

// Turns the rings that are due and truncates the segments every consumer
// has passed, for every stream.
MaintainCounts Maintain(pg::SpiSession& spi, TimestampTz now);

// Internals shared by the two files.
namespace detail {
std::vector<int32> StreamIds(pg::SpiSession& spi);
struct ConsumerCount {
  int32 stream_id;
  int64 consumers;
};
std::vector<ConsumerCount> ConsumerCounts(pg::SpiSession& spi);
// Appends the stream's consumers, each counted up to `count_limit`.
void StatsOfStream(pg::SpiSession& spi, int32 stream_id, TimestampTz now, int64 count_limit,
                   std::vector<ConsumerStats>* out);
}  // namespace detail

template <typename Visible>
std::vector<ConsumerStats> Stats(pg::SpiSession& spi, TimestampTz now, int64 count_limit,
                                 Visible&& visible) {
  std::vector<int32> streams;
  int64 consumers = 0;
  for (const detail::ConsumerCount& count : detail::ConsumerCounts(spi)) {
    if (!visible(count.stream_id)) continue;
    streams.push_back(count.stream_id);
    consumers += count.consumers;
  }
  const int64 each = ConsumerCountLimit(count_limit, consumers);
  std::vector<ConsumerStats> out;
  for (const int32 stream_id : streams) detail::StatsOfStream(spi, stream_id, now, each, &out);
  return out;
}

}  // namespace pgq::store::streams
