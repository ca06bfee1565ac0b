// History and dead-letter as rings of segments (ADR 0026; the classes of
// ADR 0021).
//
// pgq.job_history and pgq.dead_jobs are partitioned into segments; each
// table has one ring of src/pg/segments per retention class
// (store/retention.h), three or four of its segments, with its ledger rows
// in pgq.rings / pgq.ring_segments like every ring. A queue's rows go to
// the current segment of the ring of its own keep. Maintenance gives a
// sealed segment back by TRUNCATE once every row in it is past its queue's
// keep (at most the longest keep of its class: a row written before its
// queue's keep moved to a longer class leaves with its ring), and turns a
// ring that has been written when its period has passed and the next
// segment is empty. No row is ever copied or rewritten: old rows leave in
// bulk, with no row deletes, no dead tuples for VACUUM, and nothing on the
// claim path. Dead jobs kept for good live in pgq.dead_jobs_kept, which is
// no ring and never turns.
//
// Completions write the segment that was current when their backend last
// read the rings (CompletionTarget, read again after each turn's
// invalidation), dead-letter moves the one their statement reads. Either
// may be a turn or more behind: that segment is sealed, and it is
// truncated only under its ACCESS EXCLUSIVE lock, after the check made once
// the lock is held (pg/segments.h): a writer holds ROW EXCLUSIVE on it until
// it ends, so its rows are seen by that check and hold the segment.
#include <algorithm>
#include <memory>

#include "pg/args.h"
#include "pg/invalidation.h"
#include "pg/segments.h"
#include "pg/settings.h"
#include "store/internal.h"
#include "store/retention.h"

extern "C" {
#include "utils/datum.h"
}

namespace pgq::store {

namespace {

using internal::BuiltStatement;
using internal::kRetentionClasses;

// Dead jobs of a queue that stopped keeping them for good, moved out of
// pgq.dead_jobs_kept per pass.
constexpr int32 kKeptMoveBatch = 1000;
// A reader or writer in the way of a truncation is not waited for (a
// dashboard's reader must not wait behind the pass either): the next pass
// tries again.
constexpr int kLockWaitMs = 0;

// The queues that keep completed jobs (NULL: none) and, in the same order,
// the segment each one's completions go to.
pg::Statement& history_target() {
  static BuiltStatement statement{
      R"sql(
SELECT array_agg(q.queue_id ORDER BY q.queue_id) AS keeping,
       array_agg(()sql" +
          internal::SegmentOfKeepSql(true, "q.keep_completed") +
          R"sql()::int2 ORDER BY q.queue_id) AS segments
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

// $1 the class's start, $2 its bound, $3 now, $4 when the segment was
// sealed: whether every row written before the seal may be past its
// queue's keep, as the longest keep of the queues of this class says. A
// cheap test before the exact one reads the segment (a segment of a long
// class holds days of rows), which depends on no other class's queues: the
// rows of a queue whose keep left the class since are left to the exact
// test (a raised keep's rows need up to the bound; it is then made each
// pass until they are past it, rare: an admin's change of class).
pg::Statement& may_be_finished(bool history) {
  static BuiltStatement statements[2] = {
      {R"sql(
SELECT $3 >= $4 + COALESCE(max(q.keep_dead), interval '0') AS finished
  FROM pgq.queues q WHERE q.keep_dead >= $1 AND q.keep_dead < $2)sql",
       {INTERVALOID, INTERVALOID, TIMESTAMPTZOID, TIMESTAMPTZOID}},
      {R"sql(
SELECT $3 >= $4 + COALESCE(max(q.keep_completed), interval '0') AS finished
  FROM pgq.queues q WHERE q.keep_completed >= $1 AND q.keep_completed < $2)sql",
       {INTERVALOID, INTERVALOID, TIMESTAMPTZOID, TIMESTAMPTZOID}},
  };
  return statements[history].get();
}

// $1 the class's start, $2 its bound: the longest keep of its queues
// (none: 0).
pg::Statement& longest_keep(bool history) {
  static BuiltStatement statements[2] = {
      {R"sql(
SELECT COALESCE(max(q.keep_dead), interval '0') AS keep
  FROM pgq.queues q WHERE q.keep_dead >= $1 AND q.keep_dead < $2)sql",
       {INTERVALOID, INTERVALOID}},
      {R"sql(
SELECT COALESCE(max(q.keep_completed), interval '0') AS keep
  FROM pgq.queues q WHERE q.keep_completed >= $1 AND q.keep_completed < $2)sql",
       {INTERVALOID, INTERVALOID}},
  };
  return statements[history].get();
}

// $1 the segment, $2 the class's bound, $3 now: whether every row of the
// segment is past its queue's keep, at most the bound. A completed job of a
// queue that is gone is past; a dead one, or one its queue now keeps for
// good, stays its class's bound (it was buried to be kept that long).
pg::Statement& segment_finished(bool history) {
  static BuiltStatement statements[2] = {
      {R"sql(
SELECT NOT EXISTS (
  SELECT 1 FROM pgq.dead_jobs d LEFT JOIN pgq.queues q ON q.name = d.queue
   WHERE d.segment = $1 AND d.died_at + LEAST(q.keep_dead, $2) > $3) AS finished)sql",
       {INT2OID, INTERVALOID, TIMESTAMPTZOID}},
      {R"sql(
SELECT NOT EXISTS (
  SELECT 1 FROM pgq.job_history h LEFT JOIN pgq.queues q ON q.queue_id = h.queue_id
   WHERE h.segment = $1
     AND h.finished_at + LEAST(COALESCE(q.keep_completed, interval '0'), $2) > $3) AS finished)sql",
       {INT2OID, INTERVALOID, TIMESTAMPTZOID}},
  };
  return statements[history].get();
}

Interval* IntervalOf(int64 micros) {
  return pg::Guard([micros] {
    Interval* interval = static_cast<Interval*>(palloc0(sizeof(Interval)));
    interval->time = micros;
    return interval;
  });
}

// Whether every row of sealed segment `sealed` of class `klass`'s ring is
// past its keep, seen with the latest snapshot (pg/segments.h Reclaim).
bool Finished(pg::SpiSession& spi, bool history, int klass, int64 bound_us,
              const pg::segments::Sealed& sealed, TimestampTz now) {
  Interval* bound = IntervalOf(bound_us);
  // (A seal still to come: the clock was set back; the exact test decides.)
  if (sealed.sealed_at != 0 && sealed.sealed_at <= now) {
    pg::Params params;
    params.Set(0, IntervalPGetDatum(IntervalOf(internal::ClassStartUs(klass))))
        .Set(1, IntervalPGetDatum(bound))
        .Set(2, TimestampTzGetDatum(now))
        .Set(3, TimestampTzGetDatum(sealed.sealed_at));
    if (!spi.Execute(may_be_finished(history), params).Bool(0, "finished")) return false;
  }
  pg::Params params;
  params.Set(0, Int16GetDatum(static_cast<int16>(internal::FirstSegment(klass) + sealed.segment)))
      .Set(1, IntervalPGetDatum(bound))
      .Set(2, TimestampTzGetDatum(now));
  return spi.ExecuteSeeingLatest(segment_finished(history), params).Bool(0, "finished");
}

// One ring's maintenance: adopted if it has no ledger rows, its finished
// sealed segments truncated, then turned if due. Whether it turned.
bool TendRing(pg::SpiSession& spi, bool history, int klass, TimestampTz now) {
  const pg::segments::Place place = internal::RingPlace(history, klass);
  const int32 ring_id = internal::RingId(history, klass);
  pg::segments::Ring ring;
  if (!pg::segments::LoadRing(spi, place, ring_id, &ring)) {
    (void)pg::segments::AdoptRing(spi, place, ring_id, internal::RingSegments(klass), now);
    return false;
  }
  const int64 bound_us = internal::ClassBoundUs(klass);
  if (ring.sealed_with_rows) {
    (void)pg::segments::Reclaim(spi, place, ring_id, kLockWaitMs, now,
                                [&](const pg::segments::Sealed& sealed) {
                                  return Finished(spi, history, klass, bound_us, sealed, now);
                                });
  }
  // An idle ring does not turn: a turn sends every backend an invalidation.
  int64 period_us = internal::RingPeriodUs(klass);
  const int64 age = now - ring.rotated_at;
  if ((age >= 0 && age < period_us) || !pg::segments::Written(ring, ring.current)) return false;
  // Nor more often than its sealed segments can be given back: they wait
  // for the longest keep of the class, so with a period of that keep /
  // (segments - 1) the next segment is empty when the turn comes, and every
  // segment holds about as many rows (a ring turned faster stalls, its
  // current segment growing, and then truncates unevenly).
  pg::Params range;
  range.Set(0, IntervalPGetDatum(IntervalOf(internal::ClassStartUs(klass))))
      .Set(1, IntervalPGetDatum(IntervalOf(bound_us)));
  const pg::Result longest = spi.Execute(longest_keep(history), range);
  bool is_null = false;
  const int64 keep_us =
      pg::IntervalMicros(DatumGetIntervalP(longest.Value(0, "keep", &is_null)), "keep");
  period_us = std::max(period_us, keep_us / (ring.segments - 1));
  if (age >= 0 && age < period_us) return false;
  return pg::segments::Rotate(spi, place, ring_id, period_us, now);
}

}  // namespace

namespace internal {

const HistoryTarget& CompletionTarget(pg::SpiSession& spi) {
  static HistoryTarget target{};
  // create_queue and alter_queue announce a change of keep_completed
  // (api/queues.cpp), a turn of a ring a change of pgq.rings (pg/segments.h
  // Rotate).
  static pg::CacheEpoch known{pg::invalidation::kQueues | pg::invalidation::kRings};
  if (known.Valid()) return target;
  const uint64 begun = known.Begin();
  // Unknown until read whole: an error half-way (out of memory) leaves
  // nothing freed twice or half-set behind.
  known.Clear();
  pg::Params none;
  const pg::Result read = spi.Execute(history_target(), none);
  bool is_null = false;
  const Datum keeping = read.Value(0, "keeping", &is_null);
  bool no_segments = false;
  const Datum segments = read.Value(0, "segments", &no_segments);
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
  int turned = 0;
  for (const bool history : {true, false}) {
    for (int klass = 0; klass < kRetentionClasses; ++klass) {
      turned += static_cast<int>(TendRing(spi, history, klass, now));
    }
  }
  internal::MoveKeptDead(spi, now, kKeptMoveBatch);
  return turned;
}

}  // namespace pgq::store
