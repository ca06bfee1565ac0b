// pgq.claim: take up to n ready jobs, leased in the same statement that
// selects them (FOR UPDATE SKIP LOCKED), so two workers never take the same
// job and never wait on each other.
#include <algorithm>
#include <optional>

#include "api/queue_ref.h"
#include "core/validate.h"
#include "pg/args.h"
#include "pg/settings.h"
#include "pg/wakeup.h"

namespace pgq::api {

namespace {

// $1 queue id, $2 n, $3 lease, $4 now, $5 queue name.
// The result columns are exactly pgq.claimed_job, in claim order.
pg::Statement claim_jobs = {
    "WITH claimed AS ("
    "  UPDATE pgq.jobs j"
    "     SET state = 'r', attempt = j.attempt + 1, lease_until = $4 + $3"
    "   WHERE j.id = ANY (ARRAY("
    "     SELECT p.id FROM pgq.jobs p"
    "      WHERE p.queue_id = $1 AND p.state = 'p' AND p.run_at <= $4"
    "      ORDER BY p.priority DESC, p.run_at, p.id"
    "      LIMIT $2"
    "      FOR UPDATE OF p SKIP LOCKED))"
    "  RETURNING j.id, j.payload, j.attempt, j.max_attempts, j.lease_until, j.enqueued_at,"
    "            j.priority, j.run_at"
    ") "
    "SELECT id, $5, payload, attempt, max_attempts, lease_until, enqueued_at, priority"
    "  FROM claimed ORDER BY priority DESC, run_at, id",
    5,
    {INT4OID, INT4OID, INTERVALOID, TIMESTAMPTZOID, TEXTOID},
    nullptr};

// A waiting claim is woken by the commits that make jobs of its queue ready
// (pg/wakeup.h). Jobs that become due without a commit (a future run_at, a
// retry's backoff) are found by looking again at least this often.
constexpr long kRecheckMillis = 1000;

long MillisUntil(TimestampTz deadline, TimestampTz now) {
  // Rounded up, so the last sleep does not end just before the deadline.
  return static_cast<long>((deadline - now + 999) / 1000);
}

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
  pg::Params params;
  params.Set(1, Int32GetDatum(n)).Set(4, pg::TextDatum(name));

  const TimestampTz deadline = pg::AddMicros(GetCurrentTimestamp(), wait_us, "wait");
  std::optional<pg::ClaimWaiter> waiter;
  int32 waiter_queue = 0;
  for (;;) {
    // Each try sees what committed before it: a drop (undefined_object), a
    // pause, a resume, a new default lease.
    const pg::CachedQueue queue = api::CurrentQueue(spi, name);
    if (wait_us > 0) {
      // A queue dropped and created again under the same name has a new id.
      if (!waiter || waiter_queue != queue.id) {
        waiter.reset();
        waiter.emplace(queue.id);
        waiter_queue = queue.id;
      }
      waiter->Arm();
    }
    if (!queue.paused) {
      params.Set(0, Int32GetDatum(queue.id))
          .Set(2, has_lease ? PG_GETARG_DATUM(2) : IntervalPGetDatum(&queue.lease))
          .Set(3, TimestampTzGetDatum(pg::Now()));
      const uint64 claimed = spi.Execute(api::claim_jobs, params);
      if (claimed > 0) {
        for (uint64 row = 0; row < claimed; ++row) {
          HeapTuple tuple = spi.tuples()->vals[row];
          pg::Guard([&] { tuplestore_puttuple(rsinfo->setResult, tuple); });
        }
        break;
      }
      spi.FreeResult();
    }
    const TimestampTz now = GetCurrentTimestamp();
    if (now >= deadline) break;
    waiter->Sleep(std::min(api::kRecheckMillis, api::MillisUntil(deadline, now)));
  }
  return static_cast<Datum>(0);
}
