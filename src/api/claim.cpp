// pgq.claim: take up to n ready jobs, leased in the same statement that
// selects them (FOR UPDATE SKIP LOCKED), so two workers never take the same
// job and never wait on each other.
//
// The scan starts at the queue's claim hint (core/claim_hint.h) instead of
// the start of the queue, and the same statement reports, from the same
// snapshot, what the next claim may skip: that is what keeps a claim's cost
// flat when VACUUM cannot remove the index entries of jobs already taken.
#include <algorithm>
#include <chrono>
#include <optional>

#include "api/queue_ref.h"
#include "api/rights.h"
#include "api/rate_bucket.h"
#include "core/validate.h"
#include "core/wait.h"
#include "pg/ledger.h"
#include "pg/args.h"
#include "pg/queue_cache.h"
#include "pg/queue_slots.h"
#include "pg/settings.h"
#include "pg/subtransaction.h"
#include "pg/wakeup.h"

extern "C" {
#include "catalog/namespace.h"
#include "utils/lsyscache.h"
}

namespace pgq::api {

namespace {

// Claim order as an index key: (- priority, run_at, id) ascending, the
// expression of jobs_ready_idx. $6..$8 are the key the scan starts at.
#define PGQ_KEY(alias) "(-" alias ".priority, " alias ".run_at, " alias ".id)"
#define PGQ_FROM_START(alias) PGQ_KEY(alias) " >= ($6, $7, $8)"
#define PGQ_IN_ORDER(alias) " ORDER BY -" alias ".priority, " alias ".run_at, " alias ".id"

// $1 queue id, $2 n, $3 lease, $4 now, $5 queue name, $6..$8 scan start,
// ($9 this backend's pid: who claimed, for pgq.running_jobs).
// Columns 1-8 are pgq.claimed_job, then run_at: one row per claimed job, in
// claim order. The first row's key is where the next claim may start: every
// pending ready job before it in this snapshot is locked by a transaction
// that will claim or remove it, or reset the hint if it rolls back
// (pg::ledger::NoteLocked), and the claimed jobs themselves are running once this
// commits.
#define PGQ_CLAIM_JOBS(record_claimer) \
  "WITH claimed AS ("                                                                         \
  "  UPDATE pgq.jobs j"                                                                       \
  "     SET state = 'r', attempt = j.attempt + 1, lease_until = $4 + $3" record_claimer       \
  "   WHERE j.id = ANY (ARRAY("                                                               \
  "     SELECT p.id FROM pgq.jobs p"                                                          \
  "      WHERE p.queue_id = $1 AND p.state = 'p' AND p.run_at <= $4 AND " PGQ_FROM_START("p") \
  PGQ_IN_ORDER("p") " LIMIT $2 FOR UPDATE OF p SKIP LOCKED))"                                 \
  "  RETURNING j.id, j.payload, j.attempt, j.max_attempts, j.lease_until, j.enqueued_at,"     \
  "            j.priority, j.run_at"                                                          \
  ") "                                                                                        \
  "SELECT id, $5, payload, attempt, max_attempts, lease_until, enqueued_at, priority, run_at" \
  "  FROM claimed ORDER BY priority DESC, run_at, id"

pg::Statement claim_jobs = {PGQ_CLAIM_JOBS(", claimed_by = $9, claimed_at = $4"),
                            9,
                            {INT4OID, INT4OID, INTERVALOID, TIMESTAMPTZOID, TEXTOID, INT4OID,
                             TIMESTAMPTZOID, INT8OID, INT4OID},
                            nullptr};

// The same on a 1.0 catalog (before ALTER EXTENSION pgq_cpp UPDATE), whose
// pgq.jobs has no claimer columns.
pg::Statement claim_jobs_1_0 = {
    PGQ_CLAIM_JOBS(""),
    8,
    {INT4OID, INT4OID, INTERVALOID, TIMESTAMPTZOID, TEXTOID, INT4OID, TIMESTAMPTZOID, INT8OID},
    nullptr};

// Whether pgq.jobs has the claimer columns (1.1), checked again after any
// relcache invalidation (ALTER EXTENSION UPDATE adds them).
bool JobsRecordClaimer() {
  static uint64 checked_generation = 0;
  static bool checked = false;
  static bool has_columns = false;
  const uint64 generation = pg::QueueCache::Generation();
  if (!checked || generation != checked_generation) {
    has_columns = pg::Guard([] {
      const Oid schema = get_namespace_oid("pgq", false);
      return get_attnum(get_relname_relid("jobs", schema), "claimed_by") != InvalidAttrNumber;
    });
    checked_generation = generation;
    checked = true;
  }
  return has_columns;
}

// The pending jobs not due at $2 from the scan start $3..$5 on: their
// earliest run_at and the first of them in claim order (all NULL if none).
// Only after a reset or when the alarm rings (ScanPlan::must_report_passed).
pg::Statement passed_jobs = {
    "SELECT (SELECT min(u.run_at) FROM pgq.jobs u"
    "         WHERE u.queue_id = $1 AND u.state = 'p' AND u.run_at > $2"
    "           AND " PGQ_KEY("u") " >= ($3, $4, $5)),"
    "       a.priority, a.run_at, a.id"
    "  FROM (SELECT) AS one LEFT JOIN LATERAL ("
    "    SELECT u.priority, u.run_at, u.id FROM pgq.jobs u"
    "     WHERE u.queue_id = $1 AND u.state = 'p' AND u.run_at > $2"
    "       AND " PGQ_KEY("u") " >= ($3, $4, $5)" PGQ_IN_ORDER("u") " LIMIT 1) a ON true",
    5,
    {INT4OID, TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID, INT8OID},
    nullptr};

constexpr int kClaimedColumns = 8;

// A waiting claim is woken by the commits that make jobs of its queue ready
// (pg/wakeup.h). Jobs that become due without a commit (a future run_at, a
// retry's backoff) are found by looking again at least this often.
constexpr long kRecheckMillis = 1000;

// Now on the monotonic clock a claim's wait is measured by (core/wait.h).
int64 MonotonicMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

core::ClaimAlarm PassedJobs(pg::SpiSession& spi, int32 queue_id, TimestampTz now,
                            const core::ClaimKey& from) {
  pg::Params params;
  params.Set(0, Int32GetDatum(queue_id))
      .Set(1, TimestampTzGetDatum(now))
      .Set(2, Int32GetDatum(-from.priority))
      .Set(3, TimestampTzGetDatum(from.run_at))
      .Set(4, Int64GetDatum(from.id));
  pg::Result passed = spi.Execute(passed_jobs, params);
  bool none = false;
  const Datum due = passed.Value(0, 1, &none);
  const core::ClaimAlarm alarm =
      none ? core::ClaimAlarm{}
           : core::ClaimAlarm{true, DatumGetTimestampTz(due), ClaimKeyOf(passed, 0)};
  passed.Free();  // a waiting claim runs this again and again
  return alarm;
}

// One claim attempt: the jobs claimed, in claimed_job's columns 1-8.
pg::Result ClaimOnce(pg::SpiSession& spi, pg::Params& params, int32 queue_id, pg::QueueSlot* slot,
                     TimestampTz now) {
  core::ScanPlan plan{0, false, false, core::kFirstKey, false};
  if (slot != nullptr) plan = pg::PlanClaimScan(slot, now);
  if (plan.skip_scan) return pg::Result();  // nothing pending: no statement at all
  core::ScanResult result{false, core::kFirstKey, {}};
  if (slot != nullptr && plan.must_report_passed) {
    result.passed = PassedJobs(spi, queue_id, now, plan.from);
  }
  params.Set(5, Int32GetDatum(-plan.from.priority))
      .Set(6, TimestampTzGetDatum(plan.from.run_at))
      .Set(7, Int64GetDatum(plan.from.id));
  const bool record_claimer = JobsRecordClaimer();
  if (record_claimer) params.Set(8, Int32GetDatum(MyProcPid));
  pg::Result jobs = spi.Execute(record_claimer ? claim_jobs : claim_jobs_1_0, params);
  const uint64 claimed = jobs.size();
  pg::ledger::NoteCount(queue_id, pg::kClaims, claimed);
  if (slot == nullptr) return jobs;
  // Others skip the rows this claim locked; if it rolls back they are
  // pending again behind a hint that moved on.
  if (claimed > 0) pg::ledger::NoteLocked(queue_id);
  // A snapshot older than the read of the hint (REPEATABLE READ) could
  // publish past jobs that committed in between; such claims only read it.
  if (!IsolationUsesXactSnapshot()) {
    result.found_ready = claimed > 0;
    if (claimed > 0) result.first_ready = ClaimKeyOf(jobs, 0);
    pg::PublishClaimScan(slot, plan, result);
  }
  return jobs;
}

// One try of a claim: the queue as committed now, the caller's right, the
// rate limit's tokens, the statement; the jobs it took go to the result set.
class Attempt {
 public:
  struct Outcome {
    uint64 claimed;
    long sleep_cap_ms;  // how long a waiting claim may sleep before the next try
  };

  // `lease` 0: the queue's default lease.
  Attempt(pg::SpiSession& spi, std::string_view name, int32 n, Datum lease, ReturnSetInfo* rsinfo)
      : spi_(spi), name_(name), n_(n), lease_(lease), rsinfo_(rsinfo) {
    params_.Set(4, pg::TextDatum(name));
  }

  // `waiter` null: the claim does not wait. Otherwise it is armed before the
  // statement's snapshot (pg/wakeup.h), and created or replaced for the
  // queue's current id.
  Outcome Run(std::optional<pg::ClaimWaiter>* waiter) {
    // Each try sees what committed before it: a drop (undefined_object), a
    // pause, a resume, a new default lease or rate limit.
    const pg::CachedQueue queue = CurrentQueue(spi_, name_);
    RequireRight(spi_, queue.id, name_, core::kConsume);  // a revoke counts while waiting
    if (waiter != nullptr) {
      // A queue dropped and created again under the same name has a new id.
      if (!*waiter || waiter_queue_ != queue.id) {
        waiter->reset();
        waiter->emplace(queue.id);
        waiter_queue_ = queue.id;
      }
      (*waiter)->Arm();
    }
    if (queue.paused) return Outcome{0, kRecheckMillis};
    const TimestampTz now = pg::Now();
    pg::QueueSlot* slot = pg::FindQueueSlot(queue.id);
    std::optional<RateBucket> bucket;
    int32 want = n_;
    if (queue.rate_limit > 0) {
      bucket.emplace(spi_, queue.id, queue.rate_limit, slot);
      want = bucket->Take(n_, now);
      if (want == 0) {
        // No token: sleep until the next one rather than a full recheck.
        return Outcome{0,
                       std::max(1L, static_cast<long>((bucket->MicrosUntilToken() + 999) / 1000))};
      }
    }
    params_.Set(0, Int32GetDatum(queue.id))
        .Set(1, Int32GetDatum(want))
        .Set(2, lease_ != 0 ? lease_ : IntervalPGetDatum(&queue.lease))
        .Set(3, TimestampTzGetDatum(now));
    pg::Result jobs = ClaimOnce(spi_, params_, queue.id, slot, now);
    const uint64 claimed = jobs.size();
    for (uint64 row = 0; row < claimed; ++row) {
      Datum values[kClaimedColumns];
      bool nulls[kClaimedColumns];
      for (int column = 0; column < kClaimedColumns; ++column) {
        values[column] = jobs.Value(row, column + 1, &nulls[column]);
      }
      pg::Guard([&] { tuplestore_putvalues(rsinfo_->setResult, rsinfo_->setDesc, values, nulls); });
    }
    jobs.Free();
    if (bucket) bucket->Return(want - static_cast<int32>(claimed));
    return Outcome{claimed, kRecheckMillis};
  }

 private:
  pg::SpiSession& spi_;
  std::string_view name_;
  int32 n_;
  Datum lease_;
  ReturnSetInfo* rsinfo_;
  pg::Params params_;
  int32 waiter_queue_ = 0;
};

}  // namespace

}  // namespace pgq::api

using namespace pgq;

// claim(queue, n, lease, wait) returns SETOF pgq.claimed_job
PGQ_FUNCTION(pgq_claim) {
  const std::string_view name = pg::QueueNameArg(fcinfo, 0);
  const int32 n = pg::RequiredInt32(fcinfo, 1, "n");
  if (!core::IsValidClaimBatch(n)) {
    pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE,
              "n must be between " + std::to_string(core::kMinClaimBatch) + " and " +
                  std::to_string(core::kMaxClaimBatch),
              "n is " + std::to_string(n) + ".");
  }
  const bool has_lease = !pg::ArgIsNull(fcinfo, 2);
  if (has_lease) pg::CheckLeaseValue(pg::IntervalMicros(PG_GETARG_INTERVAL_P(2), "lease"), "lease");
  const int64 wait_us =
      pg::ArgIsNull(fcinfo, 3) ? 0 : pg::IntervalMicros(PG_GETARG_INTERVAL_P(3), "wait");
  if (wait_us < 0) pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE, "wait must not be negative");
  if (wait_us > 0 && IsolationUsesXactSnapshot()) {
    pg::Raise(ERRCODE_FEATURE_NOT_SUPPORTED,
              "claim with wait requires the READ COMMITTED isolation level",
              "A transaction snapshot would never see jobs committed while waiting.");
  }

  ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
  pg::Guard([&] { InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC); });

  pg::SpiSession spi;
  api::Attempt attempt{spi, name, n, has_lease ? PG_GETARG_DATUM(2) : static_cast<Datum>(0),
                       rsinfo};

  (void)pg::AddMicros(GetCurrentTimestamp(), wait_us, "wait");  // 22008 beyond the timestamp range
  if (wait_us == 0) {
    // Without a wait there is no waiter and never a sleep.
    (void)attempt.Run(nullptr);
    return static_cast<Datum>(0);
  }
  const int64 wait_end = core::WaitEnd(api::MonotonicMicros(), wait_us);
  std::optional<pg::ClaimWaiter> waiter;
  for (;;) {
    // An attempt that takes nothing is rolled back: a claim asleep holds no
    // lock on pgq.jobs (or anything else it read), so compaction and ALTER
    // EXTENSION need not wait for it.
    pg::SubTransaction sub;
    const api::Attempt::Outcome outcome = attempt.Run(&waiter);
    if (outcome.claimed > 0) {
      sub.Commit();
      break;
    }
    sub.Rollback();
    const int64 left_ms = core::MillisLeft(wait_end, api::MonotonicMicros());
    if (left_ms == 0) break;
    waiter->Sleep(static_cast<long>(std::min<int64>(outcome.sleep_cap_ms, left_ms)));
  }
  return static_cast<Datum>(0);
}
