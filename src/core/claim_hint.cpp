#include "core/claim_hint.h"

#include <algorithm>

namespace pgq::core {

ClaimAlarm MergeAlarms(const ClaimAlarm& a, const ClaimAlarm& b) {
  if (!a.set) return b;
  if (!b.set) return a;
  return ClaimAlarm{true, std::min(a.due, b.due), EarlierKey(a.key, b.key)};
}

ScanPlan PlanScan(const ClaimHint& hint, int64_t now) {
  ScanPlan plan{hint.generation, hint.nothing_pending, false, hint.start, false};
  if (hint.alarm.set && hint.alarm.due <= now) {
    plan.skip_scan = false;
    plan.alarm_consumed = true;
    plan.from = hint.nothing_pending ? hint.alarm.key : EarlierKey(hint.start, hint.alarm.key);
  }
  const bool from_start = !ClaimsBefore(kFirstKey, plan.from);
  plan.must_report_passed = !plan.skip_scan && (plan.alarm_consumed || from_start);
  return plan;
}

bool PublishScan(ClaimHint& hint, const ScanPlan& plan, const ScanResult& result) {
  if (hint.generation != plan.generation) return false;
  hint.nothing_pending = !result.found_ready;
  hint.start = result.found_ready ? result.first_ready : kFirstKey;
  // An alarm the scan did not start from covers jobs before plan.from,
  // which this scan did not see: keep it.
  hint.alarm = plan.alarm_consumed ? result.passed : MergeAlarms(hint.alarm, result.passed);
  ++hint.generation;
  return true;
}

void LowerHint(ClaimHint& hint, const ClaimKey& key) {
  if (hint.nothing_pending || ClaimsBefore(key, hint.start)) hint.start = key;
  hint.nothing_pending = false;
  ++hint.generation;
}

void AddAlarm(ClaimHint& hint, const ClaimAlarm& alarm) {
  hint.alarm = MergeAlarms(hint.alarm, alarm);
  ++hint.generation;
}

void ResetHint(ClaimHint& hint) {
  hint.nothing_pending = false;
  hint.start = kFirstKey;
  hint.alarm = ClaimAlarm{};
  ++hint.generation;
}

}  // namespace pgq::core
