// Where a claim may start reading a queue's pending jobs: the claim hint.
//
// Why. A claim reads the ready index in claim order and skips the entries of
// jobs that are no longer pending. Those entries stay in the index until
// VACUUM removes them, and VACUUM cannot while any transaction older than
// them is open (a held xmin), nor keep up with a deep churning drain. Then
// every claim wades through all of them, and gets slower with every job
// taken. The hint lets a claim start its index scan past them.
//
// The rule. For each queue the hint holds a key H with this invariant:
//   (I) no job of the queue that is pending in the committed state and not
//       locked by a transaction that will remove it or reset the hint has a
//       claim key below H, except jobs covered by the alarm.
// A claim scans from H (or from the alarm's key once the alarm is due),
// takes the first unlocked pending ready jobs (SKIP LOCKED) and publishes
// the key F of the first one it took, only if nothing else touched the hint
// since it read it (the generation is unchanged). Every pending ready job
// before F in its snapshot was locked by another transaction, and every
// transaction of ours that locks pending jobs (a claim, a cancel, a late
// complete or fail of an expired lease) resets the hint if it rolls back.
// Every transaction that makes a job pending (enqueue, release, retry,
// expiry, a group's next job) lowers the hint to that job's key *after its
// commit is visible* (its commit callback), or, for a job not due yet, adds
// it to the alarm. So:
//  - a change that committed before the claim read the hint is in the
//    claim's snapshot (the snapshot is taken after the read), and is due
//    for it (what is due is judged by a clock read after the read too), so
//    F is at or below it;
//  - a change that commits later lowers the hint afterwards, or bumps the
//    generation before the claim publishes, and the publication is dropped.
// Jobs that become due by the clock alone are what the alarm is for: the
// earliest run_at and the lowest key of the pending jobs that were not due
// when they became pending. The first claim after that run_at starts from
// the alarm's key and, having lost the alarm's detail, reports every
// not-yet-due job it passes (ScanPlan::must_report_passed) as the new alarm;
// so does a claim that scans from the start, after a reset.
//
// A hint is only ever a shortcut: starting from kFirstKey is always correct.
// Pure C++; the shared-memory table is pg/queue_slots.cpp, the SQL
// store/claim.cpp and the commit-time updates pg/ledger.cpp.
#pragma once

#include <cstdint>
#include <limits>

namespace pgq::core {

// A pending job's place in the claim order: higher priority first, then
// earlier run_at, then lower id. run_at is in microseconds (any epoch).
struct ClaimKey {
  int32_t priority;
  int64_t run_at;
  int64_t id;
};

// Whether `a` is claimed before `b`.
constexpr bool ClaimsBefore(const ClaimKey& a, const ClaimKey& b) {
  if (a.priority != b.priority) return a.priority > b.priority;
  if (a.run_at != b.run_at) return a.run_at < b.run_at;
  return a.id < b.id;
}

constexpr const ClaimKey& EarlierKey(const ClaimKey& a, const ClaimKey& b) {
  return ClaimsBefore(b, a) ? b : a;
}

// Before every job: the start of a full scan.
inline constexpr ClaimKey kFirstKey = {std::numeric_limits<int32_t>::max(),
                                       std::numeric_limits<int64_t>::min(),
                                       std::numeric_limits<int64_t>::min()};

// Not-yet-due jobs a claim passed: the earliest run_at among them and the
// lowest key among them (not necessarily the same job).
struct ClaimAlarm {
  bool set = false;
  int64_t due = 0;
  ClaimKey key = kFirstKey;
};

ClaimAlarm MergeAlarms(const ClaimAlarm& a, const ClaimAlarm& b);

struct ClaimHint {
  uint64_t generation = 0;
  // No pending job in the committed state at or after `start` (and none
  // before it, by (I)): a claim needs no scan, unless the alarm is due.
  bool nothing_pending = false;
  ClaimKey start = kFirstKey;
  ClaimAlarm alarm;
};

// What a claim reads from the hint before it takes its snapshot.
struct ScanPlan {
  uint64_t generation;
  bool skip_scan;       // nothing can be pending: return no job without a statement
  bool alarm_consumed;  // the scan starts at the alarm's key and covers its jobs
  ClaimKey from;
  // The scan must report the not-yet-due jobs it passes (ScanResult::passed):
  // it consumes the alarm or starts from the beginning.
  bool must_report_passed;
};

ScanPlan PlanScan(const ClaimHint& hint, int64_t now);

// What the claim's statement saw, from one snapshot, scanning from plan.from.
struct ScanResult {
  bool found_ready;  // false: no pending ready job at or after plan.from
  ClaimKey first_ready;
  // With plan.must_report_passed: every not-yet-due pending job at or after
  // plan.from (a lost alarm's jobs may lie beyond first_ready, in a lower
  // priority that later claims pass); otherwise left unset.
  ClaimAlarm passed;
};

// Publishes a claim's result; false (and no change) if the hint changed since
// `plan` was read.
bool PublishScan(ClaimHint& hint, const ScanPlan& plan, const ScanResult& result);

// A job with `key` became pending and is due (called after its commit is
// visible).
void LowerHint(ClaimHint& hint, const ClaimKey& key);

// Jobs became pending that are not due yet (called after the commit is
// visible): the earliest run_at among them and the lowest key.
void AddAlarm(ClaimHint& hint, const ClaimAlarm& alarm);

// Forget everything: the next claim scans from the start. For changes whose
// keys are not known (a maintenance pass, writes we did not make).
void ResetHint(ClaimHint& hint);

}  // namespace pgq::core
