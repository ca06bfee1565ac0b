// What a role may read about its own queues (3.0, issue 31): a queue's
// settings, the sessions working on it, its schedules' runs. Before 3.0 a
// dashboard read these through a column grant on pgq.queues, pg_monitor
// (pgq.workers) or a grant on pgq.schedule_runs; each is now a function
// filtered by the queue rights of SPEC §7.
//
// Coordination (teams, switches, ladders) is not about queues: who may use
// it is who holds EXECUTE on its functions, so its readers (list_teams,
// list_switches, list_ladders) are EXECUTE-granted the same way (nobody's
// until GRANT EXECUTE; docs/coordination.md).
//
// Each queue reader takes an optional queue name. Given, the queue must exist
// (undefined_object) and the caller must hold the right
// (insufficient_privilege), as list_jobs; NULL, the rows of every queue
// the caller holds the right on, and none of the others, as queue_overview.
#include <optional>

#include "service/queue_ref.h"
#include "service/rights.h"
#include "service/stream_rights.h"
#include "core/validate.h"
#include "pg/args.h"
#include "pg/settings.h"
#include "store/queues.h"
#include "store/read_surfaces.h"
#include "store/ring_jobs.h"

extern "C" {
#include "funcapi.h"
#include "utils/timestamp.h"
}

namespace pgq::api {

namespace {

// The queues whose rows the caller may read: the one named in argument 0
// (which it must hold `wanted` on), or every queue it holds `wanted` on.
struct Filter {
  service::QueueScope scope;
  std::optional<int32> queue_id;
};

Filter QueueFilter(pg::SpiSession& spi, FunctionCallInfo fcinfo, uint8 wanted) {
  if (pg::ArgIsNull(fcinfo, 0)) return {service::QueuesWithRight(spi, wanted), std::nullopt};
  const std::string_view name = pg::QueueNameArg(fcinfo, 0);
  const service::QueueRef queue = service::FindQueueWithRight(spi, name, wanted);
  return {service::QueuesWithRight(spi, wanted), queue.id};
}

// Copies every row of `rows` (the function's result columns, in order)
// into the function's result set.
void ReturnRows(FunctionCallInfo fcinfo, const pg::Result& rows) {
  ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
  const int columns = rsinfo->setDesc->natts;
  constexpr int kMaxColumns = 24;
  if (columns > kMaxColumns || columns != rows.columns()) {
    pg::Raise(ERRCODE_INTERNAL_ERROR, "result has an unexpected shape");
  }
  for (uint64 row = 0; row < rows.size(); ++row) {
    Datum values[kMaxColumns];
    bool nulls[kMaxColumns];
    for (int column = 1; column <= columns; ++column) {
      values[column - 1] = rows.Value(row, column, &nulls[column - 1]);
    }
    // The tuplestore copies the row into its own (per-query) memory.
    pg::Guard([&] { tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls); });
  }
}

// A coordination reader: (name NULL: all, max).
using CoordinationReader = pg::Result (*)(pg::SpiSession&, std::optional<std::string_view>, int32);
void ReturnCoordination(FunctionCallInfo fcinfo, CoordinationReader read, const char* what) {
  std::optional<std::string_view> name;
  if (!pg::ArgIsNull(fcinfo, 0)) name = pg::RequiredText(fcinfo, 0, what);
  const int32 max = pg::ListMaxArg(fcinfo, 1);
  pg::Guard([&] { InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC); });
  pg::SpiSession spi;
  ReturnRows(fcinfo, read(spi, name, max));
}

}  // namespace

}  // namespace pgq::api

using namespace pgq;

// queue_settings(queue) returns SETOF (queue_name, max_attempts, lease, ...):
// any right on the queue.
PGQ_FUNCTION(pgq_queue_settings) {
  pg::Guard([&] { InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC); });
  pg::SpiSession spi;
  const api::Filter filter = api::QueueFilter(spi, fcinfo, core::kAllRights);
  api::ReturnRows(fcinfo, store::ReadQueueSettings(spi, filter.scope, filter.queue_id));
  return static_cast<Datum>(0);
}

// group_weights(queue) returns SETOF (group_key, weight): any right.
PGQ_FUNCTION(pgq_group_weights) {
  pg::Guard([&] { InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC); });
  const std::string_view name = pg::QueueNameArg(fcinfo, 0);
  pg::SpiSession spi;
  const service::QueueRef queue = service::FindQueueWithRight(spi, name, core::kAllRights);
  api::ReturnRows(fcinfo, store::ReadGroupWeights(spi, queue.id));
  return static_cast<Datum>(0);
}

// fair_keys(queue, max_keys) returns SETOF (group_key, weight, held, more,
// running, served, waiting): the busiest keys of a fair queue's lanes; any
// right.
PGQ_FUNCTION(pgq_fair_keys) {
  ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
  pg::Guard([&] { InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC); });
  const std::string_view name = pg::QueueNameArg(fcinfo, 0);
  const int32 max_keys = pg::ArgIsNull(fcinfo, 1) ? 20 : PG_GETARG_INT32(1);
  if (max_keys < 1 || max_keys > 10000) {
    pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE, "max_keys must be between 1 and 10000",
              "It is " + std::to_string(max_keys) + ".");
  }
  pg::SpiSession spi;
  const service::QueueRef queue = service::FindQueueWithRight(spi, name, core::kAllRights);
  const TimestampTz now = pg::Now();
  for (const pg::job_ring::FairKeyStat& key :
       store::ring::BusiestFairKeys(spi, queue.id, max_keys)) {
    Datum values[7];
    bool nulls[7] = {};
    values[0] = pg::TextDatum(key.group_key);
    nulls[0] = key.group_key.empty();
    values[1] = Int32GetDatum(static_cast<int32>(key.weight));
    values[2] = Int32GetDatum(key.held);
    values[3] = BoolGetDatum(key.more);
    values[4] = Int32GetDatum(key.running);
    values[5] = Int64GetDatum(static_cast<int64>(key.served));
    values[6] = pg::Guard([&] {
      return DirectFunctionCall2(timestamp_mi, TimestampTzGetDatum(now),
                                 TimestampTzGetDatum(std::min(now, key.ready_since)));
    });
    pg::Guard([&] { tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls); });
  }
  return static_cast<Datum>(0);
}

// queue_workers(queue) returns SETOF (queue_name, claimer_pid, ...): the
// queue's admin.
PGQ_FUNCTION(pgq_queue_workers) {
  pg::Guard([&] { InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC); });
  pg::SpiSession spi;
  const api::Filter filter = api::QueueFilter(spi, fcinfo, core::kAdmin);
  api::ReturnRows(fcinfo, store::ReadQueueWorkers(spi, filter.scope, filter.queue_id, pg::Now()));
  return static_cast<Datum>(0);
}

// ring_running_jobs() returns SETOF (id, queue_id, attempt, max_attempts,
// claimed_at, lease_until, claimed_by, enqueued_at): the running jobs of the
// queues' rings the caller holds any right on, from the lease map: what
// the view pgq.running_jobs shows of the rings, at a cost bounded by the
// running jobs, not by what the rings hold (ADR 0028).
PGQ_FUNCTION(pgq_ring_running_jobs) {
  pg::Guard([&] { InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC); });
  pg::SpiSession spi;
  const service::QueueScope scope = service::QueuesWithRight(spi, core::kAllRights);
  ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
  if (rsinfo->setDesc->natts != 8)
    pg::Raise(ERRCODE_INTERNAL_ERROR, "result has an unexpected shape");
  for (const pg::job_ring::RunningJob& job : store::RingRunningJobs(spi, scope, std::nullopt)) {
    Datum values[8] = {Int64GetDatum(job.id),
                       Int32GetDatum(job.lease.queue_id),
                       Int32GetDatum(job.lease.attempt),
                       Int32GetDatum(job.max_attempts),
                       TimestampTzGetDatum(job.lease.claimed_at),
                       TimestampTzGetDatum(job.lease.lease_until),
                       Int32GetDatum(job.lease.claimed_by),
                       TimestampTzGetDatum(job.enqueued_at)};
    bool nulls[8] = {false, false, false, false, false, false, job.lease.claimed_by == 0, false};
    pg::Guard([&] { tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls); });
  }
  return static_cast<Datum>(0);
}

// queue_ring_ids(queue_id) returns SETOF integer: the queue's rings, for
// pgq's readers, which read them one at a time (ADR 0028); none for a
// caller without a right on it. A C function the planner takes for the row
// or so it returns (ROWS 1): a view over pgq.priority_rings, tiny and
// rarely analyzed, was estimated at ten pages of rows, which made every
// reader's plan sort each ring a dozen times on paper and be compiled by
// JIT at each call.
PGQ_FUNCTION(pgq_queue_ring_ids) {
  const int32 queue_id = PG_GETARG_INT32(0);
  pg::Guard([&] { InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC); });
  pg::SpiSession spi;
  if (!service::HoldsRight(spi, GetUserId(), queue_id, core::kAllRights)) {
    return static_cast<Datum>(0);
  }
  ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
  for (const store::ring::QueueRing& ring : store::ring::RingsOf(spi, queue_id)) {
    Datum value = Int32GetDatum(ring.ring_id);
    bool is_null = false;
    pg::Guard([&] { tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, &value, &is_null); });
  }
  return static_cast<Datum>(0);
}

// list_schedule_runs(queue, schedule, max) returns SETOF (schedule_name,
// queue_name, slot, fired_at, job_id): the queue's admin.
PGQ_FUNCTION(pgq_list_schedule_runs) {
  std::optional<std::string_view> schedule;
  if (!pg::ArgIsNull(fcinfo, 1)) schedule = pg::RequiredText(fcinfo, 1, "schedule");
  const int32 max = pg::ListMaxArg(fcinfo, 2);
  pg::Guard([&] { InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC); });
  pg::SpiSession spi;
  const api::Filter filter = api::QueueFilter(spi, fcinfo, core::kAdmin);
  api::ReturnRows(fcinfo,
                  store::ReadScheduleRuns(spi, filter.scope, filter.queue_id, schedule, max));
  return static_cast<Datum>(0);
}

// list_teams(team, max) returns SETOF (name, turn, created_at,
// active_members, inactive_members, last_member, assignments)
PGQ_FUNCTION(pgq_list_teams) {
  api::ReturnCoordination(fcinfo, store::ReadTeams, "team");
  return static_cast<Datum>(0);
}

// list_switches(switch, max) returns SETOF (name, value, updated_at)
PGQ_FUNCTION(pgq_list_switches) {
  api::ReturnCoordination(fcinfo, store::ReadSwitches, "switch");
  return static_cast<Datum>(0);
}

// list_ladders(ladder, max) returns SETOF (subject, step, updated_at)
PGQ_FUNCTION(pgq_list_ladders) {
  api::ReturnCoordination(fcinfo, store::ReadLadders, "ladder");
  return static_cast<Datum>(0);
}

// stream_segments(stream) returns SETOF (stream_name, rotation, segments,
// current_segment, rotations, rotated_at, segment, state, bytes, opened_at,
// sealed_at, truncated_at) (3.0): any right on the stream. Named, the
// stream must exist (undefined_object) and the caller must hold a right on
// it; NULL, the streams it holds a right on, as pgq.stream_stats.
PGQ_FUNCTION(pgq_stream_segments) {
  pg::Guard([&] { InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC); });
  pg::SpiSession spi;
  std::optional<int32> stream_id;
  if (!pg::ArgIsNull(fcinfo, 0)) {
    const store::streams::Stream stream =
        service::FindStreamWithRight(spi, pg::RequiredText(fcinfo, 0, "stream"), core::kAllRights);
    stream_id = stream.id;
  }
  const pg::Result rows = store::streams::RingSegments(spi, stream_id);
  ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
  constexpr int kColumns = store::streams::kRingSegmentsColumns;
  if (rsinfo->setDesc->natts != kColumns) {
    pg::Raise(ERRCODE_INTERNAL_ERROR, "result has an unexpected shape");
  }
  const Oid me = GetUserId();
  const int stream_id_column = rows.empty() ? 0 : rows.ColumnNumber("stream_id");
  for (uint64 row = 0; row < rows.size(); ++row) {
    const int32 id = rows.Int32(row, stream_id_column);
    if (!service::HoldsStreamRight(spi, me, id, core::kAllRights)) continue;
    Datum values[kColumns];
    bool nulls[kColumns];
    for (int column = 1; column <= kColumns; ++column) {
      values[column - 1] = rows.Value(row, column, &nulls[column - 1]);
    }
    pg::Guard([&] { tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls); });
  }
  return static_cast<Datum>(0);
}
