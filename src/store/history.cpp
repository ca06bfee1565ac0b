// History and dead-letter as rings of segments (ADR 0015, ADR 0021).
//
// pgq.job_history and pgq.dead_jobs are partitioned into segments, three
// or four per ring; pgq.segment_rings says which segment of each ring takes new rows.
// Each table has one ring per retention class (store/retention.h): a
// queue's rows go to the ring of its own keep, and a ring turns on a period
// fixed by its class, so one queue's keep never changes what maintenance
// does to another queue's rows. Turning: copy the rows of the next segment
// that must still be kept into the current segment of their queue's ring,
// TRUNCATE the next one and make it current. So old rows leave in bulk: no
// row deletes, no dead tuples for VACUUM, and nothing on the claim path.
// Dead jobs kept for good live in pgq.dead_jobs_kept, which never turns.
//
// Completions write the segment that was current when their backend last
// read the rings (CompletionTarget, read again after each turn's TRUNCATE
// invalidation), dead-letter moves the one their statement reads. Either
// may be a turn or more behind: the segment truncated is always the one
// after its ring's current, taken with an exclusive lock before its rows
// still kept are copied out, so a row written there before the turn is
// copied or expired, and one written after it is in a current segment.
//
// A catalog without the classes (2.0, before ALTER EXTENSION UPDATE) has
// the rings 'history' and 'dead' only, turned as 2.0 turned them: every
// third of the longest keep.
#include <memory>

#include "pg/args.h"
#include "pg/invalidation.h"
#include "pg/settings.h"
#include "store/catalog.h"
#include "store/internal.h"
#include "store/retention.h"

extern "C" {
#include "catalog/namespace.h"
#include "storage/lmgr.h"
#include "utils/datum.h"
#include "utils/lsyscache.h"
}

namespace pgq::store {

namespace {

using internal::BuiltStatement;
using internal::kKeptSegment;
using internal::kRetentionClasses;

constexpr int64 kMinPeriodUs = 10 * USECS_PER_SEC;
// Dead jobs of a queue that stopped keeping them for good, moved out of
// pgq.dead_jobs_kept per pass.
constexpr int32 kKeptMoveBatch = 1000;

// $1 first segment, $2 last: whether the ring holds any row.
pg::Statement& ring_has_rows(bool history) {
  static BuiltStatement statements[2] = {
      {"SELECT EXISTS (SELECT 1 FROM pgq.dead_jobs WHERE segment BETWEEN $1 AND $2)",
       {INT2OID, INT2OID}},
      {"SELECT EXISTS (SELECT 1 FROM pgq.job_history WHERE segment BETWEEN $1 AND $2)",
       {INT2OID, INT2OID}},
  };
  return statements[history].get();
}

// The queues that keep completed jobs (NULL: none) and, in the same order,
// the segment each one's completions go to.
pg::Statement& history_target() {
  static BuiltStatement statement{
      R"sql(
SELECT array_agg(q.queue_id ORDER BY q.queue_id),
       array_agg(()sql" +
          internal::SegmentOfKeepSql(true, "q.keep_completed") +
          R"sql()::int2 ORDER BY q.queue_id)
  FROM pgq.queues q WHERE q.keep_completed > '0')sql",
      {}};
  return statement.get();
}

// A copy of an array Datum that lives as long as the backend.
Datum CopyForBackend(Datum array) {
  MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
  const Datum copy = datumCopy(array, false, -1);
  MemoryContextSwitchTo(old);
  return copy;
}

// $1 ring. Where the ring is, and (for a catalog without classes) the
// longest time its rows are kept (NULL: no queue asks for dead jobs to be
// dropped). Read without a lock: an idle pass must not take a transaction
// id (a row lock would).
constexpr std::string_view kRingState = R"sql(
SELECT r.current, r.rotated_at,
       CASE r.ring WHEN 'history' THEN (SELECT max(keep_completed) FROM pgq.queues)
                   WHEN 'dead' THEN (SELECT max(keep_dead) FROM pgq.queues) END AS keep
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

// $1 the segment to empty, $3 now: its rows still kept, into the current
// segment of their queue's ring (on a catalog without classes: the ring's
// current).
pg::Statement& keep_history() {
  static BuiltStatement statement{
      R"sql(
INSERT INTO pgq.job_history (id, queue_id, attempt, max_attempts, priority, run_at, enqueued_at,
                             claimed_at, finished_at, dedupe_key, group_key, last_error,
                             progress, result, payload, segment)
SELECT h.id, h.queue_id, h.attempt, h.max_attempts, h.priority, h.run_at, h.enqueued_at,
       h.claimed_at, h.finished_at, h.dedupe_key, h.group_key, h.last_error, h.progress,
       h.result, h.payload, )sql" +
          internal::SegmentOfKeepSql(true, "q.keep_completed") + R"sql(
  FROM pgq.job_history h JOIN pgq.queues q ON q.queue_id = h.queue_id
 WHERE h.segment = $1 AND h.finished_at + q.keep_completed > $2)sql",
      {INT2OID, TIMESTAMPTZOID}};
  return statement.get();
}

// Dead jobs are kept unless their queue says for how long (and a job of a
// queue that is gone stays too, for good: it was never ours to drop).
constexpr std::string_view kDeadColumns = R"sql(
INSERT INTO pgq.dead_jobs (id, queue, payload, attempts, last_error, reason, died_at, priority,
                           max_attempts, enqueued_at, dedupe_key, group_key, progress,
                           dedupe_for, segment)
SELECT d.id, d.queue, d.payload, d.attempts, d.last_error, d.reason, d.died_at, d.priority,
       d.max_attempts, d.enqueued_at, d.dedupe_key, d.group_key, d.progress, d.dedupe_for, )sql";

pg::Statement& keep_dead() {
  static BuiltStatement statement{
      std::string(kDeadColumns) + internal::SegmentOfKeepSql(false, "q.keep_dead") + R"sql(
  FROM pgq.dead_jobs d LEFT JOIN pgq.queues q ON q.name = d.queue
 WHERE d.segment = $1 AND (q.keep_dead IS NULL OR d.died_at + q.keep_dead > $2))sql",
      {INT2OID, TIMESTAMPTZOID}};
  return statement.get();
}

// $1 now, $2 at most this many. Dead jobs kept for good by a queue that has
// a keep_dead now leave pgq.dead_jobs_kept: into the ring of that keep if
// still within it, else nowhere. Row deletes, but only of that queue's
// rows, once, on its admin's alter_queue.
pg::Statement& move_kept_dead() {
  static BuiltStatement statement{
      R"sql(
WITH d AS (
  DELETE FROM pgq.dead_jobs_kept k WHERE k.ctid = ANY (ARRAY(
    SELECT m.ctid FROM pgq.queues q JOIN pgq.dead_jobs_kept m ON m.queue = q.name
     WHERE q.keep_dead IS NOT NULL LIMIT $2))
  RETURNING k.*))sql" +
          std::string(kDeadColumns) + internal::SegmentOfKeepSql(false, "q.keep_dead") + R"sql(
  FROM d JOIN pgq.queues q ON q.name = d.queue
 WHERE d.died_at + q.keep_dead > $1)sql",
      {TIMESTAMPTZOID, INT4OID}};
  return statement.get();
}

// A ring's row deleted by hand (a TRUNCATE of every pgq table) comes back:
// its writers meanwhile wrote the first ring's current segment, or 0.
pg::Statement restore_ring = {R"sql(
INSERT INTO pgq.segment_rings (ring, segments, current, rotated_at) VALUES ($1, $4, $3, $2)
ON CONFLICT (ring) DO NOTHING)sql",
                              4,
                              {TEXTOID, TIMESTAMPTZOID, INT2OID, INT2OID},
                              nullptr};

pg::Statement turn_ring = {
    "UPDATE pgq.segment_rings SET current = $2, rotated_at = $3 WHERE ring = $1",
    3,
    {TEXTOID, INT2OID, TIMESTAMPTZOID},
    nullptr};

// TRUNCATE of one segment; the names are ours, built from numbers.
pg::Statement& truncate_segment(bool history, int segment) {
  static std::unique_ptr<BuiltStatement> statements[2][kKeptSegment];
  std::unique_ptr<BuiltStatement>& statement = statements[history][segment];
  if (!statement) {
    statement = std::make_unique<BuiltStatement>(
        std::string(history ? "TRUNCATE pgq.job_history_" : "TRUNCATE pgq.dead_jobs_") +
            std::to_string(segment),
        std::initializer_list<Oid>{});
  }
  return statement->get();
}

// The period of a ring whose state is `row`, or -1 if it has nothing to
// turn for. With classes, the class's; without, 2.0's: a third of the
// longest keep (none: the dead ring does not turn).
int64 PeriodUs(int klass, const pg::Result& row) {
  if (row.empty()) return -1;
  if (InstalledCatalog().retention_classes) return internal::RingPeriodUs(klass);
  if (row.IsNull(0, "keep")) return -1;
  bool is_null = false;
  const int64 keep_us =
      pg::IntervalMicros(DatumGetIntervalP(row.Value(0, "keep", &is_null)), "keep");
  return std::max(keep_us / (internal::RingSegments(0) - 1), kMinPeriodUs);
}

// Whether the ring whose state is `row` is due to turn at `now`: a period
// since it last turned, and rows in it (an empty ring waits: turning it
// would only send every backend an invalidation).
bool Due(pg::SpiSession& spi, bool history, int klass, const pg::Result& row, TimestampTz now) {
  const int64 period_us = PeriodUs(klass, row);
  if (period_us < 0) return false;
  bool is_null = false;
  const TimestampTz rotated_at = DatumGetTimestampTz(row.Value(0, "rotated_at", &is_null));
  if (now - rotated_at < period_us) return false;
  pg::Params segments;
  segments.Set(0, Int16GetDatum(internal::FirstSegment(klass)))
      .Set(1, Int16GetDatum(internal::FirstSegment(klass) + internal::RingSegments(klass) - 1));
  return spi.Execute(ring_has_rows(history), segments).Bool(0, 1);
}

// Turns one ring if it is due; whether it did.
bool TurnRing(pg::SpiSession& spi, bool history, int klass, TimestampTz now) {
  pg::Params params;
  params.Set(0, pg::TextDatum(internal::RingName(history, klass)));
  const pg::Result state = spi.Execute(read_ring(), params);
  if (state.empty()) {
    pg::Params ring;
    ring.Set(0, params.values()[0])
        .Set(1, TimestampTzGetDatum(now))
        .Set(2, Int16GetDatum(internal::FirstSegment(klass)))
        .Set(3, Int16GetDatum(internal::RingSegments(klass)));
    spi.Execute(restore_ring, ring);
    return false;
  }
  if (!Due(spi, history, klass, state, now)) return false;
  const pg::Result row = spi.Execute(lock_ring(), params);
  if (!Due(spi, history, klass, row, now)) return false;  // turned meanwhile, or locked
  const int first = internal::FirstSegment(klass);
  const int segments = internal::RingSegments(klass);
  const int current = row.Int32(0, "current");
  // A current segment outside the ring (a row restored by hand) starts it again.
  const int16 next = static_cast<int16>(current < first || current >= first + segments
                                            ? first
                                            : first + (current - first + 1) % segments);

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
  keep.Set(0, Int16GetDatum(next)).Set(1, TimestampTzGetDatum(now));
  spi.Execute(history ? keep_history() : keep_dead(), keep);
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
  // create_queue and alter_queue announce a change of keep_completed
  // (api/queues.cpp); a turn of the ring TRUNCATEs a segment, whose
  // relcache invalidation counts as a change of any relation.
  static pg::CacheEpoch known{pg::invalidation::kQueues | pg::invalidation::kAnyRelation};
  if (!InstalledCatalog().lifecycle) {
    target.variant = 0;
    return target;
  }
  if (known.Valid()) return target;
  const uint64 begun = known.Begin();
  // Unknown until read whole: an error half-way (out of memory) leaves
  // nothing freed twice or half-set behind.
  known.Clear();
  pg::Params none;
  const pg::Result read = spi.Execute(history_target(), none);
  bool is_null = false;
  const Datum keeping = read.Value(0, 1, &is_null);
  bool no_segments = false;
  const Datum segments = read.Value(0, 2, &no_segments);
  pg::Guard([&] {
    for (Datum* kept : {&target.keeping, &target.segments}) {
      const Datum old = *kept;
      *kept = 0;
      if (old != 0) pfree(DatumGetPointer(old));
    }
    if (!is_null) target.keeping = CopyForBackend(keeping);
    if (!no_segments) target.segments = CopyForBackend(segments);
  });
  target.variant = is_null ? 1 : 2;
  known.Mark(begun);
  return target;
}

}  // namespace internal

int TurnRings(pg::SpiSession& spi, TimestampTz now) {
  const Catalog& catalog = InstalledCatalog();
  if (!catalog.lifecycle) return 0;
  const int classes = catalog.retention_classes ? kRetentionClasses : 1;
  int turned = 0;
  for (const bool history : {true, false}) {
    for (int klass = 0; klass < classes; ++klass) {
      turned += static_cast<int>(TurnRing(spi, history, klass, now));
    }
  }
  if (catalog.retention_classes) {
    pg::Params params;
    params.Set(0, TimestampTzGetDatum(now)).Set(1, Int32GetDatum(kKeptMoveBatch));
    spi.Execute(move_kept_dead(), params);
  }
  return turned;
}

}  // namespace pgq::store
