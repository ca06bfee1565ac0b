// Retention classes of the history and dead-letter rings (ADR 0021).
//
// A queue's completed and dead jobs go to the ring of the class of its own
// keep_completed / keep_dead, and each ring turns on a period fixed by its
// class: so what maintenance does to a queue's rows (how often they are
// copied forward, how long they stay on disk past their keep) depends on
// that queue's keep only, never on another queue's.
#pragma once

#include <string>
#include <string_view>

#include "pg/pg.h"

namespace pgq::store::internal {

// Class 0 keeps rows under 2 minutes, class k (1-10) from 2 * 4^(k-1)
// minutes to 4 times that, the last class from 364 days on (a row kept
// longer is copied forward once a year). Class 0's ring is
// 'history' / 'dead' with the four segments 0-3 it had in 2.0; class k's is
// 'history_k' / 'dead_k' with three.
inline constexpr int kRetentionClasses = 11;
// Dead jobs kept for good (keep_dead NULL, or their queue dropped): one
// segment, pgq.dead_jobs_kept, that never turns.
inline constexpr int16 kKeptSegment = 34;

// How many segments class `klass`'s ring has, and its first one.
inline int RingSegments(int klass) { return klass == 0 ? 4 : 3; }
inline int16 FirstSegment(int klass) {
  return static_cast<int16>(klass == 0 ? 0 : 4 + 3 * (klass - 1));
}

// The ring's name in pgq.segment_rings.
std::string RingName(bool history, int klass);

// How often class `klass`'s ring turns. A row is checked when its segment
// comes round (segments - 1 to segments periods after it was written), then
// every segments - 1 periods: with this period, that is never before the
// class's shortest keep (class 0: 30 seconds), so a row is copied forward
// fewer than 4 times (the last class: once a year) and leaves at
// most about its class's shortest keep after it expired.
int64 RingPeriodUs(int klass);

// SQL: the segment that takes a row of a queue keeping such rows for
// `keep` (an SQL expression; NULL for dead jobs: for good). Where a class
// ring has no row (deleted by hand; maintenance restores it), this is the
// 'history' / 'dead' ring's current segment.
std::string SegmentOfKeepSql(bool history, std::string_view keep);

}  // namespace pgq::store::internal
