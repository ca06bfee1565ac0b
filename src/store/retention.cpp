// Retention classes of the history and dead-letter rings (ADR 0021).
#include "store/retention.h"

namespace pgq::store::internal {

namespace {

constexpr int64 kMinuteUs = 60 * USECS_PER_SEC;

// Where class `klass` (1 and up) starts, in minutes: 2 * 4^(klass - 1).
int64 ClassFromMinutes(int klass) { return int64{2} << (2 * (klass - 1)); }

// Class 0's rows are checked from 30 seconds on: its ring of four turns
// every 10 seconds, as often as 2.0's ever did.
constexpr int64 kClassZeroPeriodUs = 10 * USECS_PER_SEC;

}  // namespace

std::string RingName(bool history, int klass) {
  std::string name = history ? "history" : "dead";
  if (klass > 0) name += "_" + std::to_string(klass);
  return name;
}

int64 RingPeriodUs(int klass) {
  if (klass == 0) return kClassZeroPeriodUs;
  return ClassFromMinutes(klass) * kMinuteUs / (RingSegments(klass) - 1);
}

std::string SegmentOfKeepSql(bool history, std::string_view keep) {
  std::string ring = "CASE";
  if (!history) ring += " WHEN k.keep IS NULL THEN 'dead_kept'";
  for (int klass = kRetentionClasses - 1; klass > 0; --klass) {
    ring += " WHEN k.keep >= interval '" + std::to_string(ClassFromMinutes(klass)) +
            " minutes' THEN '" + RingName(history, klass) + "'";
  }
  ring += " ELSE '" + RingName(history, 0) + "' END";
  std::string sql = "COALESCE((SELECT r.current FROM (SELECT ";
  sql += keep;
  sql += " AS keep) k JOIN pgq.segment_rings r ON r.ring = ";
  sql += ring;
  sql += "),\n         (SELECT r.current FROM pgq.segment_rings r WHERE r.ring = '";
  sql += RingName(history, 0);
  sql += "'), 0)";
  return sql;
}

}  // namespace pgq::store::internal
