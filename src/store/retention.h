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

// Class k keeps rows for [kClassFrom[k], kClassFrom[k + 1]); its ring is
// 'history' / 'dead' for k = 0 (segments 0-3), else 'history_k' / 'dead_k'
// (segments 4k to 4k + 3). Each class starts 4 times later than the one
// before, so a row is copied forward at most 3 times (the last class: once
// per 34 hours it is kept).
inline constexpr int kRetentionClasses = 7;
inline constexpr int kRingSegments = 4;
// Dead jobs kept for good (keep_dead NULL, or their queue dropped): one
// segment, pgq.dead_jobs_kept, that never turns.
inline constexpr int16 kKeptSegment = kRetentionClasses * kRingSegments;

// The first segment of class `klass`'s ring.
inline int16 FirstSegment(int klass) { return static_cast<int16>(klass * kRingSegments); }

// The ring's name in pgq.segment_rings.
std::string RingName(bool history, int klass);

// How often class `klass`'s ring turns: a third of the shortest keep of
// the class (30 seconds for class 0), so a row of the class is at least
// that keep old when its segment comes round, and at most 4 periods.
int64 RingPeriodUs(int klass);

// SQL: the segment that takes a row of a queue keeping such rows for
// `keep` (an SQL expression; NULL for dead jobs: for good). On a catalog
// without the classes (2.0, before ALTER EXTENSION UPDATE) the class rings
// have no row and this is the 'history' / 'dead' ring's current segment, as
// 2.0 wrote.
std::string SegmentOfKeepSql(bool history, std::string_view keep);

}  // namespace pgq::store::internal
