// Retention classes of the history and dead-letter rings (ADR 0021, ADR 0026).
//
// A queue's completed and dead jobs go to the ring of the class of its own
// keep_completed / keep_dead, a ring of src/pg/segments: each class's ring
// turns on a period fixed by its class and gives a sealed segment back by
// TRUNCATE once every row in it is past its queue's keep (at most the
// longest keep of the class). So what maintenance does to a queue's rows
// (when they leave the disk) depends on its class, never on another
// queue's keep, and no row is ever copied.
#pragma once

#include <string>
#include <string_view>

#include "pg/pg.h"
#include "pg/segments.h"

namespace pgq::store::internal {

// Class 0 keeps rows under 2 minutes, class k (1-10) from 2 * 4^(k-1)
// minutes to 4 times that, the last class from 364 days on. Class 0's ring
// has the four segments 0-3 of pgq.job_history / pgq.dead_jobs it had in
// 2.0; class k's the three from 4 + 3(k-1).
inline constexpr int kRetentionClasses = 11;
// Dead jobs kept for good (keep_dead NULL, or their queue dropped): one
// segment, pgq.dead_jobs_kept, that is no ring and never turns.
inline constexpr int16 kKeptSegment = 34;

// How many segments class `klass`'s ring has, and its first one.
inline int RingSegments(int klass) { return klass == 0 ? 4 : 3; }
inline int16 FirstSegment(int klass) {
  return static_cast<int16>(klass == 0 ? 0 : 4 + 3 * (klass - 1));
}

// The ring's id in pgq.rings: negative, so that no stream's (their ids come
// from a sequence from 1) is ever one; history class k is -1 - k, dead
// class k -21 - k. Dumps leave these rings' ledger rows out (the restored
// database adopts its rings again, pg/segments.h AdoptRing).
inline int32 RingId(bool history, int klass) { return history ? -1 - klass : -21 - klass; }
// Where the ring's rows are: its class's segments of pgq.job_history or
// pgq.dead_jobs.
pg::segments::Place RingPlace(bool history, int klass);

// How often class `klass`'s ring turns (at most: a turn also waits for the
// next segment to be empty).
int64 RingPeriodUs(int klass);

// Where class `klass` ends, past its longest keep (the last class: just
// past 100 years, the longest keep there is): no row of the ring stays past it, whatever its
// queue's keep is now (a keep raised into a longer class applies to the rows
// written after it).
int64 ClassBoundUs(int klass);
// Where class `klass` starts (class 0: 0).
int64 ClassStartUs(int klass);

// SQL: the segment that takes a row of a queue keeping such rows for
// `keep` (an SQL expression; NULL for dead jobs: for good): the current
// segment of its class's ring. A ring without its ledger row (not yet
// adopted) takes rows in its first segment, as adoption starts it; on a
// catalog without the classes (2.0, before ALTER EXTENSION UPDATE) the
// class-0 ring takes them.
std::string SegmentOfKeepSql(bool history, std::string_view keep);

}  // namespace pgq::store::internal
