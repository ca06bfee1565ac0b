// Retention classes of the history and dead-letter rings (ADR 0021).
#include "store/retention.h"

#include <array>

namespace pgq::store::internal {

namespace {

constexpr int64 kMinuteUs = 60 * USECS_PER_SEC;

// Where each class starts, and its SQL literal (the CASE of
// SegmentOfKeepSql compares a queue's keep with these).
constexpr std::array<int64, kRetentionClasses> kClassFromUs = {0,
                                                               2 * kMinuteUs,
                                                               8 * kMinuteUs,
                                                               32 * kMinuteUs,
                                                               128 * kMinuteUs,
                                                               512 * kMinuteUs,
                                                               2048 * kMinuteUs};
constexpr std::array<std::string_view, kRetentionClasses> kClassFromSql = {
    "'0'",           "'2 minutes'",   "'8 minutes'",   "'32 minutes'",
    "'128 minutes'", "'512 minutes'", "'2048 minutes'"};
// Class 0's rows are copied forward from 30 seconds on: its ring turns
// every 10 seconds, as often as 2.0's ever did.
constexpr int64 kClassZeroCopiesFromUs = 30 * USECS_PER_SEC;

}  // namespace

std::string RingName(bool history, int klass) {
  std::string name = history ? "history" : "dead";
  if (klass > 0) name += "_" + std::to_string(klass);
  return name;
}

int64 RingPeriodUs(int klass) {
  return (klass == 0 ? kClassZeroCopiesFromUs : kClassFromUs[klass]) / 3;
}

std::string SegmentOfKeepSql(bool history, std::string_view keep) {
  std::string ring = "CASE";
  if (!history) {
    ring += " WHEN k.keep IS NULL THEN 'dead_kept'";
  }
  for (int klass = kRetentionClasses - 1; klass > 0; --klass) {
    ring += " WHEN k.keep >= interval ";
    ring += kClassFromSql[klass];
    ring += " THEN '" + RingName(history, klass) + "'";
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
