// pgq.compact_jobs(): an explicit compaction of pgq.job_rows (ADR 0008), with
// larger limits than the maintenance pass's; the rules are
// service/compact.h.
#include "pg/boundary.h"
#include "service/compact.h"

using namespace pgq;

namespace {

// What an explicit pgq.compact_jobs() accepts: far more than the worker's
// own rewrites, which must stay short under load.
constexpr int kCallLockTimeoutMillis = 1000;
constexpr int64 kCallMaxJobs = 1000000;
constexpr int64 kCallMaxBytes = 512 * 1024 * 1024;

}  // namespace

// compact_jobs() returns bigint: the live jobs kept, NULL when the table was
// busy for a second.
PGQ_FUNCTION(pgq_compact_jobs) {
  // Checked before the lock: taking it needs no privilege of its own.
  if (!service::MayCompactJobs()) {
    pg::Raise(
        ERRCODE_INSUFFICIENT_PRIVILEGE, "permission denied to compact pgq.job_rows",
        "Only the owner of pgq.job_rows (the role that installed pgq_cpp) or a superuser may.");
  }
  if (IsolationUsesXactSnapshot()) {
    pg::Raise(ERRCODE_INVALID_TRANSACTION_STATE,
              "pgq.compact_jobs() must run in a READ COMMITTED transaction",
              "A snapshot older than the table lock would miss jobs committed before it.");
  }
  const service::CompactResult result =
      service::CompactJobs(kCallLockTimeoutMillis, kCallMaxJobs, kCallMaxBytes);
  if (result.outcome == service::CompactOutcome::kTooBig) {
    pg::Raise(ERRCODE_PROGRAM_LIMIT_EXCEEDED, "pgq.job_rows holds too many live jobs to compact",
              "At most " + std::to_string(kCallMaxJobs) + " jobs and " +
                  std::to_string(kCallMaxBytes / (1024 * 1024)) + " MB are rewritten at once.",
              "VACUUM reclaims the space once no old transaction holds it.");
  }
  if (result.outcome == service::CompactOutcome::kBusy) PG_RETURN_NULL();
  PG_RETURN_INT64(result.jobs);
}
