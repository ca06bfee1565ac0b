// pgq.claim: arguments and the wait; each try (the queue, the caller's
// right, the rate limit, the statement) is service/claim.h's.
#include <algorithm>
#include <chrono>

#include "core/validate.h"
#include "core/wait.h"
#include "pg/args.h"
#include "pg/channel_wait.h"
#include "pg/settings.h"
#include "pg/subtransaction.h"
#include "pg/trace_context.h"
#include "service/claim.h"
#include "store/jobs.h"

namespace pgq::api {

namespace {

// Now on the monotonic clock a claim's wait is measured by (core/wait.h).
int64 MonotonicMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A claimed row's place in claim order: priority descending, run_at, id.
struct ClaimedRow {
  int32 priority;
  TimestampTz run_at;
  int64 id;
  const pg::Result* rows;
  uint64 row;
};

// pgq.traced_job's last columns from a claimed row's trace_context and
// trace_links (store::Claim's columns after run_at): traceparent,
// tracestate, links.
void TraceColumns(const pg::Result& rows, uint64 row, Datum* values, bool* nulls) {
  bool is_null = false;
  const Datum stored = rows.Value(row, store::kClaimedColumns + 2, &is_null);
  pg::TraceColumns(is_null ? 0 : stored, values, nulls);
  values[2] = rows.Value(row, store::kClaimedColumns + 3, &nulls[2]);
}

// claim(queue or queues, n, lease, wait) returns SETOF pgq.claimed_job;
// `traced` (claim_traced): SETOF pgq.traced_job, the same columns, then each
// job's trace context (ADR 0030).
Datum ClaimInto(FunctionCallInfo fcinfo, std::vector<std::string_view> names, bool traced) {
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
  service::Claimer claimer{spi, std::move(names), n,
                           has_lease ? PG_GETARG_DATUM(2) : static_cast<Datum>(0)};
  // The jobs one try took go to the result set in claim order (across
  // queues: a queue's rows are in that order already); their rows are freed
  // at once (a waiting claim tries again and again). How many it took.
  const auto take = [&](service::Claimer::Try& attempt) {
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
      Datum values[store::kClaimedColumns + 3];
      bool nulls[store::kClaimedColumns + 3];
      for (int column = 0; column < store::kClaimedColumns; ++column) {
        values[column] = claimed.rows->Value(claimed.row, column + 1, &nulls[column]);
      }
      if (traced) {
        TraceColumns(*claimed.rows, claimed.row, values + store::kClaimedColumns,
                     nulls + store::kClaimedColumns);
      }
      pg::Guard([&] { tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls); });
    }
    for (pg::Result& rows : attempt.jobs) rows.Free();
    return order.size();
  };

  (void)pg::AddMicros(GetCurrentTimestamp(), wait_us, "wait");  // 22008 beyond the timestamp range
  if (wait_us == 0) {
    // Without a wait there is no waiter and never a sleep.
    service::Claimer::Try attempt = claimer.Once();
    (void)take(attempt);
    return static_cast<Datum>(0);
  }
  const int64 wait_end = core::WaitEnd(MonotonicMicros(), wait_us);
  pg::ChannelWaiter waiter;
  for (;;) {
    // An attempt that takes nothing is rolled back: a claim asleep holds no
    // lock on pgq.job_rows (or anything else it read), so compaction and ALTER
    // EXTENSION need not wait for it.
    pg::SubTransaction sub;
    service::Claimer::Try attempt = claimer.Once(&waiter);
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
PGQ_FUNCTION(pgq_claim) { return api::ClaimInto(fcinfo, {pg::QueueNameArg(fcinfo, 0)}, false); }

// claim(queues text[], n, lease, wait) returns SETOF pgq.claimed_job: from
// any of the queues, in claim order across them.
PGQ_FUNCTION(pgq_claim_queues) {
  return api::ClaimInto(fcinfo, pg::QueueNamesArg(fcinfo, 0), false);
}

// claim_traced(queue, n, lease, wait) returns SETOF pgq.traced_job
PGQ_FUNCTION(pgq_claim_traced) {
  return api::ClaimInto(fcinfo, {pg::QueueNameArg(fcinfo, 0)}, true);
}

// claim_traced(queues text[], n, lease, wait) returns SETOF pgq.traced_job
PGQ_FUNCTION(pgq_claim_queues_traced) {
  return api::ClaimInto(fcinfo, pg::QueueNamesArg(fcinfo, 0), true);
}
