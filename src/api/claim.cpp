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
#include "pg/channel_wait.h"
#include "pg/queue_cache.h"
#include "pg/queue_slots.h"
#include "pg/settings.h"
#include "pg/subtransaction.h"
#include "store/jobs.h"

namespace pgq::api {

namespace {

// A waiting claim is woken by the commits that make jobs of its queue ready
// (pg/channel_wait.h). Jobs that become due without a commit (a future run_at, a
// retry's backoff) are found by looking again when the claim hint's alarm
// says the first of them is due; an empty rate limit's next token when it
// comes; anything else at least every pgq.wait_recheck (pg/settings.h).
// The shortest sleep until a job the claim hint's alarm knows becomes due
// (pgq.wait_recheck is never shorter).
constexpr long kAlarmFloorMillis = 10;

// Now on the monotonic clock a claim's wait is measured by (core/wait.h).
int64 MonotonicMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

uint64 Claimer::Try::size() const {
  uint64 total = 0;
  for (const pg::Result& rows : jobs) total += rows.size();
  return total;
}

Claimer::Claimer(pg::SpiSession& spi, std::vector<std::string_view> queues, int32 n, Datum lease)
    : spi_(spi), names_(std::move(queues)), n_(n), lease_(lease) {
  for (std::string_view name : names_) name_datums_.push_back(pg::TextDatum(name));
}

long Claimer::ClaimFrom(const pg::CachedQueue& queue, size_t index, int32 n, TimestampTz now,
                        bool waiting, Try* result) {
  pg::QueueSlot* slot = pg::FindQueueSlot(queue.id);
  std::optional<RateBucket> bucket;
  int32 want = n;
  if (queue.rate_limit > 0) {
    bucket.emplace(spi_, queue.id, queue.rate_limit, slot);
    want = bucket->Take(n, now);
    // No token: sleep until the next one rather than a full recheck.
    if (want == 0) {
      return std::max(1L, static_cast<long>((bucket->MicrosUntilToken() + 999) / 1000));
    }
  }
  // A waiting claim reads the hint's alarm before the scan too: a hint
  // reset (a maintenance pass's, once a minute) that lands while the scan
  // runs drops the alarm and what the scan would have published, and the
  // claim would sleep a whole pgq.wait_recheck past a job due sooner.
  const int64 due_before = waiting && slot != nullptr ? pg::NextAlarm(slot) : 0;
  pg::Result jobs = store::Claim(spi_, queue.id, name_datums_[index], want,
                                 lease_ != 0 ? lease_ : IntervalPGetDatum(&queue.lease), now, slot,
                                 queue.max_running);
  if (bucket) bucket->Return(want - static_cast<int32>(jobs.size()));
  const long recheck = pg::WaitRecheckMillis();
  if (!jobs.empty()) {
    result->jobs.push_back(std::move(jobs));
    return recheck;
  }
  // Nothing ready: a job the hint knows will be due sooner than the next
  // recheck (a future run_at, a retry's backoff) is looked for then (not
  // sooner than kAlarmFloorMillis: an alarm already due that this try could
  // not settle is not polled in a loop). An alarm read before the scan and
  // due after `now` was not consumed by this try's scan: its job is still to
  // come.
  int64 due = slot != nullptr ? pg::NextAlarm(slot) : 0;
  if (due_before > now && (due == 0 || due_before < due)) due = due_before;
  if (due == 0) return recheck;
  return std::clamp<long>(static_cast<long>((due - now + 999) / 1000), kAlarmFloorMillis, recheck);
}

Claimer::Try Claimer::Once(pg::ChannelWaiter* waiter) {
  std::vector<pg::CachedQueue> queues;
  queues.reserve(names_.size());
  for (std::string_view name : names_) {
    queues.push_back(CurrentQueue(spi_, name));
    RequireRight(spi_, queues.back().id, name, core::kConsume);
  }
  if (waiter != nullptr) {
    // The queues' current ids: one dropped and created again under the same
    // name has a new one.
    std::vector<int32> ids;
    for (const pg::CachedQueue& queue : queues) ids.push_back(queue.id);
    waiter->Arm(pg::Channel::Queues(ids.data(), static_cast<int>(ids.size())));
  }
  Try result{{}, pg::WaitRecheckMillis()};
  const TimestampTz now = pg::Now();
  const bool waiting = waiter != nullptr;
  if (queues.size() == 1) {
    if (!queues[0].paused) result.sleep_cap_ms = ClaimFrom(queues[0], 0, n_, now, waiting, &result);
    return result;
  }
  // Several queues: where the next n jobs are, then that many from each. A
  // queue that gives fewer than asked (its rate limit or cap, or others
  // took them) is left out of the next round, which looks for the rest.
  std::vector<bool> done(queues.size(), false);
  for (size_t i = 0; i < queues.size(); ++i) done[i] = queues[i].paused;
  for (size_t round = 0; round < queues.size(); ++round) {
    const int32 want = n_ - static_cast<int32>(result.size());
    std::vector<store::SpreadQueue> spread;
    for (size_t i = 0; i < queues.size(); ++i) {
      spread.push_back(done[i] ? store::SpreadQueue{0, nullptr}
                               : store::SpreadQueue{queues[i].id, pg::FindQueueSlot(queues[i].id)});
    }
    const std::vector<int32> counts = store::SpreadClaim(spread, want, now);
    bool short_of = false;
    for (size_t i = 0; i < queues.size(); ++i) {
      if (counts[i] == 0) continue;
      const uint64 before = result.size();
      result.sleep_cap_ms =
          std::min(result.sleep_cap_ms, ClaimFrom(queues[i], i, counts[i], now, waiting, &result));
      if (result.size() - before < static_cast<uint64>(counts[i])) {
        done[i] = true;
        short_of = true;
      }
    }
    if (!short_of || static_cast<int32>(result.size()) >= n_) break;
  }
  return result;
}

namespace {

// A claimed row's place in claim order: priority descending, run_at, id.
struct ClaimedRow {
  int32 priority;
  TimestampTz run_at;
  int64 id;
  const pg::Result* rows;
  uint64 row;
};

// claim(queue or queues, n, lease, wait) returns SETOF pgq.claimed_job.
Datum ClaimInto(FunctionCallInfo fcinfo, std::vector<std::string_view> names) {
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
  Claimer claimer{spi, std::move(names), n, has_lease ? PG_GETARG_DATUM(2) : static_cast<Datum>(0)};
  // The jobs one try took go to the result set in claim order (across
  // queues: a queue's rows are in that order already); their rows are freed
  // at once (a waiting claim tries again and again). How many it took.
  const auto take = [&](Claimer::Try& attempt) {
    std::vector<ClaimedRow> order;
    // One queue's rows are in claim order already: their keys are read only
    // to merge the rows of several queues.
    const bool merge = attempt.jobs.size() > 1;
    for (const pg::Result& rows : attempt.jobs) {
      if (rows.empty()) continue;
      if (!merge) {
        for (uint64 row = 0; row < rows.size(); ++row)
          order.push_back(ClaimedRow{0, 0, 0, &rows, row});
        continue;
      }
      const int priority = rows.ColumnNumber("priority"), run_at = rows.ColumnNumber("run_at"),
                id = rows.ColumnNumber("id");
      for (uint64 row = 0; row < rows.size(); ++row) {
        bool is_null = false;
        order.push_back(ClaimedRow{rows.Int32(row, priority),
                                   DatumGetTimestampTz(rows.Value(row, run_at, &is_null)),
                                   rows.Int64(row, id), &rows, row});
      }
    }
    if (merge) {
      std::sort(order.begin(), order.end(), [](const ClaimedRow& a, const ClaimedRow& b) {
        if (a.priority != b.priority) return a.priority > b.priority;
        if (a.run_at != b.run_at) return a.run_at < b.run_at;
        return a.id < b.id;
      });
    }
    for (const ClaimedRow& claimed : order) {
      Datum values[store::kClaimedColumns];
      bool nulls[store::kClaimedColumns];
      for (int column = 0; column < store::kClaimedColumns; ++column) {
        values[column] = claimed.rows->Value(claimed.row, column + 1, &nulls[column]);
      }
      pg::Guard([&] { tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls); });
    }
    for (pg::Result& rows : attempt.jobs) rows.Free();
    return order.size();
  };

  (void)pg::AddMicros(GetCurrentTimestamp(), wait_us, "wait");  // 22008 beyond the timestamp range
  if (wait_us == 0) {
    // Without a wait there is no waiter and never a sleep.
    Claimer::Try attempt = claimer.Once();
    (void)take(attempt);
    return static_cast<Datum>(0);
  }
  const int64 wait_end = core::WaitEnd(MonotonicMicros(), wait_us);
  pg::ChannelWaiter waiter;
  for (;;) {
    // An attempt that takes nothing is rolled back: a claim asleep holds no
    // lock on pgq.jobs (or anything else it read), so compaction and ALTER
    // EXTENSION need not wait for it.
    pg::SubTransaction sub;
    Claimer::Try attempt = claimer.Once(&waiter);
    if (take(attempt) > 0) {
      sub.Commit();
      break;
    }
    sub.Rollback();
    const int64 left_ms = core::MillisLeft(wait_end, MonotonicMicros());
    if (left_ms == 0) break;
    waiter.Sleep(static_cast<long>(std::min<int64>(attempt.sleep_cap_ms, left_ms)));
  }
  return static_cast<Datum>(0);
}

}  // namespace

}  // namespace pgq::api

using namespace pgq;

// claim(queue, n, lease, wait) returns SETOF pgq.claimed_job
PGQ_FUNCTION(pgq_claim) { return api::ClaimInto(fcinfo, {pg::QueueNameArg(fcinfo, 0)}); }

// claim(queues text[], n, lease, wait) returns SETOF pgq.claimed_job: from
// any of the queues, in claim order across them.
PGQ_FUNCTION(pgq_claim_queues) { return api::ClaimInto(fcinfo, pg::QueueNamesArg(fcinfo, 0)); }
