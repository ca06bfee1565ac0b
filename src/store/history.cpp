// History and dead-letter as rings of segments (ADR 0015).
//
// pgq.job_history and pgq.dead_jobs are each partitioned into four
// segments; pgq.segment_rings says which one takes new rows. Maintenance
// turns a ring once its current segment is a period old: it copies the rows
// of the next segment that must still be kept into the current one,
// TRUNCATEs the next one and makes it current. So old rows leave in bulk:
// no row deletes, no dead tuples for VACUUM, and nothing on the claim path.
// The period is a third of the longest time a queue keeps such rows (never
// under kMinPeriod), so in the usual case the copy finds nothing to keep.
//
// Completions write the segment that was current when their backend last
// read the ring (CompletionTarget, read again after each turn's TRUNCATE
// invalidation), dead-letter moves the one their statement reads. Either
// may be a turn or more behind: the segment truncated is always the one
// after the current, taken with an exclusive lock before its rows still
// kept are copied out, so a row written there before the turn is copied or
// expired, and one written after it is in the current segment.
#include "pg/args.h"
#include "pg/queue_cache.h"
#include "pg/settings.h"
#include "store/catalog.h"
#include "store/internal.h"

extern "C" {
#include "catalog/namespace.h"
#include "storage/lmgr.h"
#include "utils/datum.h"
#include "utils/lsyscache.h"
}

namespace pgq::store {

namespace {

using internal::BuiltStatement;

constexpr int kSegments = 4;
constexpr int64 kMinPeriodUs = 10 * USECS_PER_SEC;

pg::Statement any_history = {"SELECT EXISTS (SELECT 1 FROM pgq.job_history)", 0, {}, nullptr};

// The queues that keep completed jobs (NULL: none) and where they go now.
pg::Statement history_target = {R"sql(
SELECT (SELECT array_agg(queue_id) FROM pgq.queues WHERE keep_completed > '0'),
       COALESCE((SELECT current FROM pgq.segment_rings WHERE ring = 'history'), 0)::int4)sql",
                                0,
                                {},
                                nullptr};

// A copy of an int4[] Datum that lives as long as the backend.
Datum CopyForBackend(Datum array) {
  MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
  const Datum copy = datumCopy(array, false, -1);
  MemoryContextSwitchTo(old);
  return copy;
}

// $1 ring. Where the ring is, and the longest time its rows are kept (NULL:
// no queue asks for dead jobs to be dropped). Read without a lock: an idle
// pass must not take a transaction id (a row lock would).
constexpr std::string_view kRingState = R"sql(
SELECT r.current, r.rotated_at,
       CASE r.ring WHEN 'history' THEN (SELECT max(keep_completed) FROM pgq.queues)
                   ELSE (SELECT max(keep_dead) FROM pgq.queues) END AS keep
  FROM pgq.segment_rings r WHERE r.ring = $1)sql";

pg::Statement& read_ring() {
  static BuiltStatement statement{std::string(kRingState), {TEXTOID}};
  return statement.get();
}

// The same, locked when the ring is due, so that two maintenance runners
// never turn it at once (the second skips).
pg::Statement& lock_ring() {
  static BuiltStatement statement{std::string(kRingState) + "\n   FOR UPDATE SKIP LOCKED",
                                  {TEXTOID}};
  return statement.get();
}

// $1 the segment to empty, $2 the current one, $3 now.
pg::Statement keep_history = {R"sql(
INSERT INTO pgq.job_history (id, queue_id, attempt, max_attempts, priority, run_at, enqueued_at,
                             claimed_at, finished_at, dedupe_key, group_key, last_error,
                             progress, result, payload, segment)
SELECT h.id, h.queue_id, h.attempt, h.max_attempts, h.priority, h.run_at, h.enqueued_at,
       h.claimed_at, h.finished_at, h.dedupe_key, h.group_key, h.last_error, h.progress,
       h.result, h.payload, $2
  FROM pgq.job_history h JOIN pgq.queues q ON q.queue_id = h.queue_id
 WHERE h.segment = $1 AND h.finished_at + q.keep_completed > $3)sql",
                              3,
                              {INT2OID, INT2OID, TIMESTAMPTZOID},
                              nullptr};

// Dead jobs are kept unless their queue says for how long (and a job of a
// queue that is gone stays too: it was never ours to drop).
pg::Statement keep_dead = {R"sql(
INSERT INTO pgq.dead_jobs (id, queue, payload, attempts, last_error, reason, died_at, priority,
                           max_attempts, enqueued_at, dedupe_key, group_key, progress,
                           dedupe_for, segment)
SELECT d.id, d.queue, d.payload, d.attempts, d.last_error, d.reason, d.died_at, d.priority,
       d.max_attempts, d.enqueued_at, d.dedupe_key, d.group_key, d.progress, d.dedupe_for, $2
  FROM pgq.dead_jobs d LEFT JOIN pgq.queues q ON q.name = d.queue
 WHERE d.segment = $1 AND (q.keep_dead IS NULL OR d.died_at + q.keep_dead > $3))sql",
                           3,
                           {INT2OID, INT2OID, TIMESTAMPTZOID},
                           nullptr};

// A ring's row deleted by hand (a TRUNCATE of every pgq table) comes back:
// its writers meanwhile wrote segment 0.
pg::Statement restore_ring = {R"sql(
INSERT INTO pgq.segment_rings (ring, segments, current, rotated_at) VALUES ($1, 4, 0, $2)
ON CONFLICT (ring) DO NOTHING)sql",
                              2,
                              {TEXTOID, TIMESTAMPTZOID},
                              nullptr};

pg::Statement turn_ring = {
    "UPDATE pgq.segment_rings SET current = $2, rotated_at = $3 WHERE ring = $1",
    3,
    {TEXTOID, INT2OID, TIMESTAMPTZOID},
    nullptr};

// TRUNCATE of one segment; the names are ours, from a fixed list.
pg::Statement& truncate_segment(bool history, int segment) {
  static BuiltStatement statements[2][kSegments] = {
      {{"TRUNCATE pgq.dead_jobs_0", {}},
       {"TRUNCATE pgq.dead_jobs_1", {}},
       {"TRUNCATE pgq.dead_jobs_2", {}},
       {"TRUNCATE pgq.dead_jobs_3", {}}},
      {{"TRUNCATE pgq.job_history_0", {}},
       {"TRUNCATE pgq.job_history_1", {}},
       {"TRUNCATE pgq.job_history_2", {}},
       {"TRUNCATE pgq.job_history_3", {}}},
  };
  return statements[history][segment].get();
}

// Whether the ring whose state is `row` is due to turn at `now`.
bool Due(pg::SpiSession& spi, bool history, const pg::Result& row, TimestampTz now) {
  if (row.empty() || row.IsNull(0, "keep")) return false;
  bool is_null = false;
  const int64 keep_us =
      pg::IntervalMicros(DatumGetIntervalP(row.Value(0, "keep", &is_null)), "keep");
  const int64 period_us = std::max(keep_us / (kSegments - 1), kMinPeriodUs);
  const TimestampTz rotated_at = DatumGetTimestampTz(row.Value(0, "rotated_at", &is_null));
  if (now - rotated_at < period_us) return false;
  // No queue keeps completed jobs: the ring turns only to clear what was
  // kept before (no reader shows those rows any more).
  if (history && keep_us <= 0) {
    pg::Params none;
    return spi.Execute(any_history, none).Bool(0, 1);
  }
  return true;
}

// Turns one ring if it is due; whether it did.
bool TurnRing(pg::SpiSession& spi, bool history, TimestampTz now) {
  pg::Params params;
  params.Set(0, pg::TextDatum(history ? "history" : "dead"));
  const pg::Result state = spi.Execute(read_ring(), params);
  if (state.empty()) {
    pg::Params ring;
    ring.Set(0, params.values()[0]).Set(1, TimestampTzGetDatum(now));
    spi.Execute(restore_ring, ring);
    return false;
  }
  if (!Due(spi, history, state, now)) return false;
  const pg::Result row = spi.Execute(lock_ring(), params);
  if (!Due(spi, history, row, now)) return false;  // turned meanwhile, or locked
  const int16 current = static_cast<int16>(row.Int32(0, "current"));
  const int16 next = static_cast<int16>((current + 1) % kSegments);

  // A reader of the table (pgq.job, a dashboard) holds the segment for a
  // moment: then this pass leaves the ring as it is, and the next one turns it.
  const std::string segment =
      std::string(history ? "job_history_" : "dead_jobs_") + std::to_string(next);
  const bool locked = pg::Guard([&] {
    const Oid relid = get_relname_relid(segment.c_str(), get_namespace_oid("pgq", false));
    return OidIsValid(relid) && ConditionalLockRelationOid(relid, AccessExclusiveLock);
  });
  if (!locked) return false;

  pg::Params keep;
  keep.Set(0, Int16GetDatum(next)).Set(1, Int16GetDatum(current)).Set(2, TimestampTzGetDatum(now));
  spi.Execute(history ? keep_history : keep_dead, keep);
  pg::Params none;
  spi.Execute(truncate_segment(history, next), none);
  pg::Params turn;
  turn.Set(0, params.values()[0]).Set(1, Int16GetDatum(next)).Set(2, TimestampTzGetDatum(now));
  spi.Execute(turn_ring, turn);
  return true;
}

}  // namespace

namespace internal {

const HistoryTarget& CompletionTarget(pg::SpiSession& spi) {
  static HistoryTarget target{};
  static bool known = false;
  static uint64 known_generation = 0;
  if (!InstalledCatalog().lifecycle) {
    target.variant = 0;
    return target;
  }
  // create_queue and alter_queue send an invalidation when keep_completed
  // changes (api/queues.cpp), and a turn of the ring TRUNCATEs a segment,
  // which sends one too: either empties this with the queue cache.
  const uint64 generation = pg::QueueCache::Generation();
  if (known && generation == known_generation) return target;
  // Unknown until read whole: an error half-way (out of memory) leaves
  // nothing freed twice or half-set behind.
  known = false;
  pg::Params none;
  const pg::Result read = spi.Execute(history_target, none);
  bool is_null = false;
  const Datum keeping = read.Value(0, 1, &is_null);
  pg::Guard([&] {
    const Datum old = target.keeping;
    target.keeping = 0;
    if (old != 0) pfree(DatumGetPointer(old));
    if (!is_null) target.keeping = CopyForBackend(keeping);
  });
  target.variant = is_null ? 1 : 2;
  target.segment = static_cast<int16>(read.Int32(0, 2));
  known_generation = generation;
  known = true;
  return target;
}

}  // namespace internal

int TurnRings(pg::SpiSession& spi, TimestampTz now) {
  if (!InstalledCatalog().lifecycle) return 0;
  return static_cast<int>(TurnRing(spi, true, now)) + static_cast<int>(TurnRing(spi, false, now));
}

}  // namespace pgq::store
