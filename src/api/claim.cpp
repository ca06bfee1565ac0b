// pgq.claim: arguments, the queue and the caller's right, the rate limit,
// and the wait; the statement is the jobs store's (store/claim.cpp).
#include <algorithm>
#include <chrono>
#include <optional>

#include "api/claim.h"

#include "api/queue_ref.h"
#include "api/rights.h"
#include "api/rate_limit.h"
#include "core/validate.h"
#include "core/wait.h"
#include "pg/args.h"
#include "pg/queue_cache.h"
#include "pg/queue_slots.h"
#include "pg/settings.h"
#include "pg/subtransaction.h"
#include "pg/wakeup.h"
#include "store/jobs.h"

namespace pgq::api {

namespace {

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

}  // namespace

Claimer::Claimer(pg::SpiSession& spi, std::string_view queue, int32 n, Datum lease)
    : spi_(spi), name_(queue), name_datum_(pg::TextDatum(queue)), n_(n), lease_(lease) {}

Claimer::Try Claimer::Once(std::optional<pg::ClaimWaiter>* waiter) {
  const pg::CachedQueue queue = CurrentQueue(spi_, name_);
  RequireRight(spi_, queue.id, name_, core::kConsume);
  if (waiter != nullptr) {
    // A queue dropped and created again under the same name has a new id.
    if (!*waiter || waiter_queue_ != queue.id) {
      waiter->reset();
      waiter->emplace(queue.id);
      waiter_queue_ = queue.id;
    }
    (*waiter)->Arm();
  }
  if (queue.paused) return Try{pg::Result(), kRecheckMillis};
  const TimestampTz now = pg::Now();
  pg::QueueSlot* slot = pg::FindQueueSlot(queue.id);
  std::optional<RateBucket> bucket;
  int32 want = n_;
  if (queue.rate_limit > 0) {
    bucket.emplace(spi_, queue.id, queue.rate_limit, slot);
    want = bucket->Take(n_, now);
    if (want == 0) {
      // No token: sleep until the next one rather than a full recheck.
      return Try{pg::Result(),
                 std::max(1L, static_cast<long>((bucket->MicrosUntilToken() + 999) / 1000))};
    }
  }
  pg::Result jobs = store::Claim(spi_, queue.id, name_datum_, want,
                                 lease_ != 0 ? lease_ : IntervalPGetDatum(&queue.lease), now, slot);
  if (bucket) bucket->Return(want - static_cast<int32>(jobs.size()));
  return Try{jobs, kRecheckMillis};
}

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
  api::Claimer claimer{spi, name, n, has_lease ? PG_GETARG_DATUM(2) : static_cast<Datum>(0)};
  // The jobs one try took go to the result set; their rows are freed at
  // once (a waiting claim tries again and again). How many it took.
  const auto take = [&](api::Claimer::Try& attempt) {
    const uint64 claimed = attempt.jobs.size();
    for (uint64 row = 0; row < claimed; ++row) {
      Datum values[store::kClaimedColumns];
      bool nulls[store::kClaimedColumns];
      for (int column = 0; column < store::kClaimedColumns; ++column) {
        values[column] = attempt.jobs.Value(row, column + 1, &nulls[column]);
      }
      pg::Guard([&] { tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls); });
    }
    attempt.jobs.Free();
    return claimed;
  };

  (void)pg::AddMicros(GetCurrentTimestamp(), wait_us, "wait");  // 22008 beyond the timestamp range
  if (wait_us == 0) {
    // Without a wait there is no waiter and never a sleep.
    api::Claimer::Try attempt = claimer.Once();
    (void)take(attempt);
    return static_cast<Datum>(0);
  }
  const int64 wait_end = core::WaitEnd(api::MonotonicMicros(), wait_us);
  std::optional<pg::ClaimWaiter> waiter;
  for (;;) {
    // An attempt that takes nothing is rolled back: a claim asleep holds no
    // lock on pgq.jobs (or anything else it read), so compaction and ALTER
    // EXTENSION need not wait for it.
    pg::SubTransaction sub;
    api::Claimer::Try attempt = claimer.Once(&waiter);
    if (take(attempt) > 0) {
      sub.Commit();
      break;
    }
    sub.Rollback();
    const int64 left_ms = core::MillisLeft(wait_end, api::MonotonicMicros());
    if (left_ms == 0) break;
    waiter->Sleep(static_cast<long>(std::min<int64>(attempt.sleep_cap_ms, left_ms)));
  }
  return static_cast<Datum>(0);
}
