// pgq.job and pgq.list_jobs: a job wherever it is, as pgq.job_info rows.
//
// Rights: produce or consume on the job's queue shows everything; admin
// alone shows the job without its payload, progress and result (an
// operator sees that a job failed and why, not the customer data it
// carried). A job of a queue the caller holds no right on is answered as
// one that does not exist (issue 15, L4).
#include <algorithm>
#include <optional>

#include "service/queue_ref.h"
#include "service/rights.h"
#include "core/validate.h"
#include "pg/args.h"
#include "pg/settings.h"
#include "store/jobs.h"

extern "C" {
#include "funcapi.h"
}

namespace pgq::api {

namespace {

constexpr std::string_view kStates[] = {"scheduled", "ready", "waiting",  "running",
                                        "done",      "dead",  "cancelled"};

// Copies `rows` (pgq.job_info columns, then queue_id) into the function's
// result set; `redact(queue_id)` says whether a row's payload, progress,
// result and trace context (its tracestate is vendor data; the trace id is
// shown) are withheld, `shown(queue_id)` whether the row is shown at all.
template <typename Shown, typename Redact>
void ReturnJobInfo(FunctionCallInfo fcinfo, const pg::Result& rows, Shown shown, Redact redact) {
  ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
  const int columns = std::min(rsinfo->setDesc->natts, store::kJobInfoColumns);
  if (rows.empty()) return;
  // Columns a role with only the admin right does not see.
  const int queue_id_column = rows.ColumnNumber("queue_id"),
            progress = rows.ColumnNumber("progress"), result = rows.ColumnNumber("result"),
            payload = rows.ColumnNumber("payload"),
            trace_context = rows.ColumnNumber("trace_context");
  for (uint64 row = 0; row < rows.size(); ++row) {
    const int32 queue_id = rows.Int32(row, queue_id_column);
    if (!shown(queue_id)) continue;
    const bool hide = redact(queue_id);
    Datum values[store::kJobInfoColumns];
    bool nulls[store::kJobInfoColumns];
    for (int column = 1; column <= columns; ++column) {
      values[column - 1] = rows.Value(row, column, &nulls[column - 1]);
      if (hide && (column == progress || column == result || column == payload ||
                   column == trace_context)) {
        values[column - 1] = 0;
        nulls[column - 1] = true;
      }
    }
    // The tuplestore copies the row into its own (per-query) memory.
    pg::Guard([&] { tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls); });
  }
}

// Why a job is dead (pgq.dead_jobs.reason).
constexpr std::string_view kReasons[] = {"exhausted", "cancelled", "expired", "dependency_failed"};

// Text argument `arg` (`name`), NULL or one of `allowed`; anything else is
// invalid_parameter_value: unknown `what` "<value>", with `hint`.
template <size_t N>
std::optional<std::string_view> OneOfArg(FunctionCallInfo fcinfo, int arg, const char* name,
                                         const std::string_view (&allowed)[N],
                                         std::string_view what, const char* hint) {
  if (pg::ArgIsNull(fcinfo, arg)) return std::nullopt;
  const std::string_view value = pg::RequiredText(fcinfo, arg, name);
  if (std::find(std::begin(allowed), std::end(allowed), value) == std::end(allowed)) {
    pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE,
              "unknown " + std::string(what) + " \"" + std::string(value) + "\"", {}, hint);
  }
  return value;
}

constexpr uint8 kSeesEverything = core::kProduce | core::kConsume;

}  // namespace

}  // namespace pgq::api

using namespace pgq;

// job(id) returns SETOF pgq.job_info (no row or one)
PGQ_FUNCTION(pgq_job) {
  const int64 id = pg::RequiredInt64(fcinfo, 0, "id");
  pg::Guard([&] { InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC); });
  pg::SpiSession spi;
  const pg::Result job =
      store::ReadJob(spi, id, pg::Now(), service::RequireScope(spi, core::kAllRights));
  const Oid me = GetUserId();
  api::ReturnJobInfo(
      fcinfo, job,
      [&](int32 queue_id) { return service::HoldsRight(spi, me, queue_id, core::kAllRights); },
      [&](int32 queue_id) {
        return !service::HoldsRight(spi, me, queue_id, api::kSeesEverything);
      });
  return static_cast<Datum>(0);
}

// list_jobs(queue, state, max, before_id, reason) returns SETOF
// pgq.job_info; reason (3.0) keeps the dead and cancelled jobs that died
// for it.
PGQ_FUNCTION(pgq_list_jobs) {
  const std::string_view name = pg::QueueNameArg(fcinfo, 0);
  const std::optional<std::string_view> state =
      api::OneOfArg(fcinfo, 1, "state", api::kStates, "job state",
                    "The states are scheduled, ready, waiting, running, done, dead and cancelled.");
  const std::optional<std::string_view> reason =
      api::OneOfArg(fcinfo, 4, "reason", api::kReasons, "dead reason",
                    "The reasons are exhausted, cancelled, expired and dependency_failed.");
  const int32 max = pg::ListMaxArg(fcinfo, 2);
  const std::optional<int64> before_id =
      pg::ArgIsNull(fcinfo, 3) ? std::nullopt : std::optional<int64>(PG_GETARG_INT64(3));
  pg::Guard([&] { InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC); });
  pg::SpiSession spi;
  const service::QueueRef queue = service::FindQueueWithRight(spi, name, core::kAllRights);
  const bool hide = !service::HoldsRight(spi, GetUserId(), queue.id, api::kSeesEverything);
  const pg::Result jobs =
      store::ListJobs(spi, queue.id, name, state, reason, max, before_id, pg::Now());
  api::ReturnJobInfo(
      fcinfo, jobs, [](int32) { return true; }, [hide](int32) { return hide; });
  return static_cast<Datum>(0);
}

// find_jobs(key, max) returns SETOF pgq.job_info (3.0): the live jobs
// (pending, running, waiting) whose dedupe or group key is `key`, of every
// queue the caller holds a right on, newest first; rights and redaction as
// list_jobs. Completed and dead jobs are not looked for: pgq.job_history
// and pgq.dead_jobs have no index on the keys.
PGQ_FUNCTION(pgq_find_jobs) {
  const std::string_view key = pg::RequiredText(fcinfo, 0, "key");
  const int32 max = pg::ListMaxArg(fcinfo, 1);
  pg::Guard([&] { InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC); });
  pg::SpiSession spi;
  const service::QueueScope scope = service::RequireScope(spi, core::kAllRights);
  const pg::Result jobs = store::FindJobs(spi, key, scope, max, pg::Now());
  const Oid me = GetUserId();
  api::ReturnJobInfo(
      fcinfo, jobs, [](int32) { return true; },
      [&](int32 queue_id) {
        return !service::HoldsRight(spi, me, queue_id, api::kSeesEverything);
      });
  return static_cast<Datum>(0);
}

// job_dependencies(id, max) returns SETOF (direction, id, queue, state)
// (3.0): the job's parents not yet settled, its children waiting for it
// and, once it is dead or cancelled, the dependents it took with it; at
// most max of each. Rights as pgq.job: a job of a queue the caller holds
// no right on has none, as an unknown id; related jobs of such queues are
// left out.
PGQ_FUNCTION(pgq_job_dependencies) {
  const int64 id = pg::RequiredInt64(fcinfo, 0, "id");
  const int32 max = pg::ListMaxArg(fcinfo, 1);
  pg::Guard([&] { InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC); });
  pg::SpiSession spi;
  const service::QueueScope scope = service::RequireScope(spi, core::kAllRights);
  const TimestampTz now = pg::Now();
  const pg::Result job = store::ReadJob(spi, id, now, scope);
  const Oid me = GetUserId();
  if (job.empty() || !service::HoldsRight(spi, me, job.Int32(0, "queue_id"), core::kAllRights)) {
    return static_cast<Datum>(0);
  }
  // Dead or cancelled: it has a dead reason.
  bool alive = false;
  job.Value(0, "dead_reason", &alive);
  const pg::Result related = store::RelatedJobs(spi, id, max, !alive, now);
  ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
  constexpr int kColumns = 4;  // then queue_id
  if (rsinfo->setDesc->natts != kColumns) {
    pg::Raise(ERRCODE_INTERNAL_ERROR, "result has an unexpected shape");
  }
  const int queue_id = related.empty() ? 0 : related.ColumnNumber("queue_id");
  for (uint64 row = 0; row < related.size(); ++row) {
    if (!service::HoldsRight(spi, me, related.Int32(row, queue_id), core::kAllRights)) continue;
    Datum values[kColumns];
    bool nulls[kColumns];
    for (int column = 1; column <= kColumns; ++column) {
      values[column - 1] = related.Value(row, column, &nulls[column - 1]);
    }
    pg::Guard([&] { tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls); });
  }
  return static_cast<Datum>(0);
}
