// Retention classes of the history and dead-letter rings (ADR 0021, ADR 0026).
#include "store/retention.h"

#include "core/validate.h"

namespace pgq::store::internal {

namespace {

constexpr int64 kMinuteUs = 60 * USECS_PER_SEC;

// Where class `klass` (1 and up) starts, in minutes: 2 * 4^(klass - 1).
int64 ClassFromMinutes(int klass) { return int64{2} << (2 * (klass - 1)); }

// Class 0's ring of four turns every 10 seconds, as often as 2.0's ever did.
constexpr int64 kClassZeroPeriodUs = 10 * USECS_PER_SEC;

}  // namespace

pg::segments::Place RingPlace(bool history, int klass) {
  return pg::segments::Place{history ? "job_history" : "dead_jobs", FirstSegment(klass)};
}

int64 RingPeriodUs(int klass) {
  if (klass == 0) return kClassZeroPeriodUs;
  return ClassFromMinutes(klass) * kMinuteUs / (RingSegments(klass) - 1);
}

int64 ClassStartUs(int klass) { return klass == 0 ? 0 : ClassFromMinutes(klass) * kMinuteUs; }

int64 ClassBoundUs(int klass) {
  // Past the longest keep there is, so that a keep of exactly 100 years is
  // inside the class (keep < bound).
  if (klass + 1 >= kRetentionClasses) return core::kMaxSettingIntervalMicros + 1;
  return ClassFromMinutes(klass + 1) * kMinuteUs;
}

std::string SegmentOfKeepSql(bool history, std::string_view keep) {
  // The class of the keep (-1: dead jobs kept for good).
  std::string klass = "CASE";
  if (!history) klass += " WHEN k.keep IS NULL THEN -1";
  for (int c = kRetentionClasses - 1; c > 0; --c) {
    klass += " WHEN k.keep >= interval '" + std::to_string(ClassFromMinutes(c)) +
             " minutes' THEN " + std::to_string(c);
  }
  klass += " ELSE 0 END";
  // Each class's ring and first segment.
  std::string classes = "(VALUES ";
  if (!history) classes += "(-1, NULL::int4, " + std::to_string(kKeptSegment) + "), ";
  for (int c = 0; c < kRetentionClasses; ++c) {
    if (c > 0) classes += ", ";
    classes += "(" + std::to_string(c) + ", " + std::to_string(RingId(history, c)) + ", " +
               std::to_string(FirstSegment(c)) + ")";
  }
  classes += ") AS c(klass, ring_id, first)";
  std::string sql = "(SELECT COALESCE(c.first + r.current, c.first)\n   FROM (SELECT ";
  sql += keep;
  sql += " AS keep) k\n   JOIN ";
  sql += classes;
  sql += " ON c.klass = " + klass + "\n   LEFT JOIN pgq.rings r ON r.ring_id = c.ring_id)";
  return sql;
}

}  // namespace pgq::store::internal
