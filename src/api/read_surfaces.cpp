// What a role may read about its own queues (2.1, issue 31): a queue's
// settings, the sessions working on it, its schedules' runs. Before 2.1 a
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

#include "api/queue_ref.h"
#include "api/rights.h"
#include "api/stream_rights.h"
#include "core/validate.h"
#include "pg/args.h"
#include "pg/settings.h"

extern "C" {
#include "funcapi.h"
}

namespace pgq::api {

namespace {

// $1 every queue, $2 the queue ids (int4[]), $3 one queue's id (NULL: all).
// The columns of pgq.queue_settings, in its order.
pg::Statement read_queue_settings = {
    "SELECT q.name, q.max_attempts, q.lease, q.backoff_base, q.backoff_max, q.retention,"
    "       q.keep_completed, q.keep_dead, q.notify, q.rate_limit, q.max_running,"
    "       q.group_concurrency, q.handler, q.owner, q.paused, q.created_at"
    "  FROM pgq.queues q"
    " WHERE ($1 OR q.queue_id = ANY ($2)) AND ($3 IS NULL OR q.queue_id = $3)"
    " ORDER BY q.name",
    3,
    {BOOLOID, INT4ARRAYOID, INT4OID},
    nullptr};

// One row per queue and claiming session: its running jobs, their oldest
// and newest claim, how many leases ran out, and who the session is as
// pg_stat_activity knows it (NULL once it is gone; a pid is reused once its
// session ends, so only a session that began before the claim counts).
pg::Statement read_queue_workers = {
    "SELECT q.name, j.claimed_by, a.usename, a.application_name, a.client_addr,"
    "       a.pid IS NOT NULL, a.backend_start, pg_catalog.count(*),"
    "       pg_catalog.min(j.claimed_at), pg_catalog.max(j.claimed_at),"
    "       pg_catalog.count(*) FILTER (WHERE j.lease_until < $4)"
    "  FROM pgq.jobs j"
    "  JOIN pgq.queues q ON q.queue_id = j.queue_id"
    "  LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = j.claimed_by"
    "        AND (a.backend_start IS NULL OR a.backend_start <= j.claimed_at)"
    " WHERE j.state = 'r' AND ($1 OR j.queue_id = ANY ($2)) AND ($3 IS NULL OR j.queue_id = $3)"
    " GROUP BY q.name, j.claimed_by, a.pid, a.usename, a.application_name, a.client_addr,"
    "          a.backend_start"
    " ORDER BY q.name, pg_catalog.min(j.claimed_at), j.claimed_by",
    4,
    {BOOLOID, INT4ARRAYOID, INT4OID, TIMESTAMPTZOID},
    nullptr};

// $1, $2, $3 as above, $4 one schedule's name (NULL: all), $5 max. Newest
// first.
pg::Statement read_schedule_runs = {
    "SELECT r.name, q.name, r.slot, r.fired_at, r.job_id"
    "  FROM pgq.schedule_runs r"
    "  JOIN pgq.recurring s ON s.name = r.name"
    "  JOIN pgq.queues q ON q.queue_id = s.queue_id"
    " WHERE ($1 OR s.queue_id = ANY ($2)) AND ($3 IS NULL OR s.queue_id = $3)"
    "   AND ($4 IS NULL OR r.name = $4)"
    " ORDER BY r.fired_at DESC, r.name"
    " LIMIT $5",
    5,
    {BOOLOID, INT4ARRAYOID, INT4OID, TEXTOID, INT4OID},
    nullptr};

// $1 one team (NULL: all), $2 max. A team with its members in turn order.
pg::Statement read_teams = {
    "SELECT t.name, t.turn, t.created_at,"
    "       pg_catalog.array_agg(m.name ORDER BY m.member_id) FILTER (WHERE m.active),"
    "       pg_catalog.array_agg(m.name ORDER BY m.member_id) FILTER (WHERE NOT m.active),"
    "       (SELECT l.name FROM pgq.team_members l"
    "         WHERE l.team_id = t.team_id AND l.member_id = t.last_member_id),"
    "       (SELECT pg_catalog.count(*) FROM pgq.assignments a WHERE a.team_id = t.team_id)"
    "  FROM pgq.teams t LEFT JOIN pgq.team_members m ON m.team_id = t.team_id"
    " WHERE $1 IS NULL OR t.name = $1"
    " GROUP BY t.team_id ORDER BY t.name LIMIT $2",
    2,
    {TEXTOID, INT4OID},
    nullptr};

pg::Statement read_switches = {
    "SELECT name, value, updated_at FROM pgq.switches"
    " WHERE $1 IS NULL OR name = $1 ORDER BY name LIMIT $2",
    2,
    {TEXTOID, INT4OID},
    nullptr};

// Most recently climbed first.
pg::Statement read_ladders = {
    "SELECT subject, step, updated_at FROM pgq.ladders"
    " WHERE $1 IS NULL OR subject = $1 ORDER BY updated_at DESC, subject LIMIT $2",
    2,
    {TEXTOID, INT4OID},
    nullptr};

// The queues whose rows the caller may read: the one named in argument 0
// (which it must hold `wanted` on), or every queue it holds `wanted` on.
struct Filter {
  QueueScope scope;
  std::optional<int32> queue_id;
};

Filter QueueFilter(pg::SpiSession& spi, FunctionCallInfo fcinfo, uint8 wanted) {
  if (pg::ArgIsNull(fcinfo, 0)) return {QueuesWithRight(spi, wanted), std::nullopt};
  const std::string_view name = pg::QueueNameArg(fcinfo, 0);
  const QueueRef queue = FindQueue(spi, name);
  RequireRight(spi, queue.id, name, wanted);
  return {QueuesWithRight(spi, wanted), queue.id};
}

pg::Params& SetFilter(pg::Params& params, const Filter& filter) {
  SetScope(params, 0, filter.scope);
  return params.SetOptional(2, !filter.queue_id, Int32GetDatum(filter.queue_id.value_or(0)));
}

// Copies every row of `rows` (the function's result columns, in order)
// into the function's result set.
void ReturnRows(FunctionCallInfo fcinfo, const pg::Result& rows) {
  ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
  const int columns = rsinfo->setDesc->natts;
  constexpr int kMaxColumns = 16;
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

int32 MaxArg(FunctionCallInfo fcinfo, int index) {
  const int32 max = pg::ArgIsNull(fcinfo, index) ? 100 : PG_GETARG_INT32(index);
  if (max < 1 || max > core::kMaxClaimBatch) {
    pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE,
              "max must be between 1 and " + std::to_string(core::kMaxClaimBatch));
  }
  return max;
}

// A coordination reader: (name NULL: all, max).
void ReturnCoordination(FunctionCallInfo fcinfo, pg::Statement& statement, const char* what) {
  std::optional<std::string_view> name;
  if (!pg::ArgIsNull(fcinfo, 0)) name = pg::RequiredText(fcinfo, 0, what);
  const int32 max = MaxArg(fcinfo, 1);
  pg::Guard([&] { InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC); });
  pg::SpiSession spi;
  pg::Params params;
  params.SetOptional(0, !name, name ? pg::TextDatum(*name) : static_cast<Datum>(0))
      .Set(1, Int32GetDatum(max));
  ReturnRows(fcinfo, spi.Execute(statement, params));
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
  pg::Params params;
  api::SetFilter(params, filter);
  api::ReturnRows(fcinfo, spi.Execute(api::read_queue_settings, params));
  return static_cast<Datum>(0);
}

// queue_workers(queue) returns SETOF (queue_name, claimer_pid, ...): the
// queue's admin.
PGQ_FUNCTION(pgq_queue_workers) {
  pg::Guard([&] { InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC); });
  pg::SpiSession spi;
  const api::Filter filter = api::QueueFilter(spi, fcinfo, core::kAdmin);
  pg::Params params;
  api::SetFilter(params, filter).Set(3, TimestampTzGetDatum(pg::Now()));
  api::ReturnRows(fcinfo, spi.Execute(api::read_queue_workers, params));
  return static_cast<Datum>(0);
}

// list_schedule_runs(queue, schedule, max) returns SETOF (schedule_name,
// queue_name, slot, fired_at, job_id): the queue's admin.
PGQ_FUNCTION(pgq_list_schedule_runs) {
  std::optional<std::string_view> schedule;
  if (!pg::ArgIsNull(fcinfo, 1)) schedule = pg::RequiredText(fcinfo, 1, "schedule");
  const int32 max = api::MaxArg(fcinfo, 2);
  pg::Guard([&] { InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC); });
  pg::SpiSession spi;
  const api::Filter filter = api::QueueFilter(spi, fcinfo, core::kAdmin);
  pg::Params params;
  api::SetFilter(params, filter)
      .SetOptional(3, !schedule, schedule ? pg::TextDatum(*schedule) : static_cast<Datum>(0))
      .Set(4, Int32GetDatum(max));
  api::ReturnRows(fcinfo, spi.Execute(api::read_schedule_runs, params));
  return static_cast<Datum>(0);
}

// list_teams(team, max) returns SETOF (name, turn, created_at,
// active_members, inactive_members, last_member, assignments)
PGQ_FUNCTION(pgq_list_teams) {
  api::ReturnCoordination(fcinfo, api::read_teams, "team");
  return static_cast<Datum>(0);
}

// list_switches(switch, max) returns SETOF (name, value, updated_at)
PGQ_FUNCTION(pgq_list_switches) {
  api::ReturnCoordination(fcinfo, api::read_switches, "switch");
  return static_cast<Datum>(0);
}

// list_ladders(ladder, max) returns SETOF (subject, step, updated_at)
PGQ_FUNCTION(pgq_list_ladders) {
  api::ReturnCoordination(fcinfo, api::read_ladders, "ladder");
  return static_cast<Datum>(0);
}

// stream_segments(stream) returns SETOF (stream_name, rotation, segments,
// current_segment, rotations, rotated_at, segment, state, bytes, opened_at,
// sealed_at, truncated_at) (2.1): any right on the stream. Named, the
// stream must exist (undefined_object) and the caller must hold a right on
// it; NULL, the streams it holds a right on, as pgq.stream_stats.
PGQ_FUNCTION(pgq_stream_segments) {
  pg::Guard([&] { InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC); });
  pg::SpiSession spi;
  std::optional<int32> stream_id;
  if (!pg::ArgIsNull(fcinfo, 0)) {
    const store::streams::Stream stream =
        api::FindStream(spi, pg::RequiredText(fcinfo, 0, "stream"));
    api::RequireStreamRight(spi, stream, core::kAllRights);
    stream_id = stream.id;
  }
  const pg::Result rows = store::streams::RingSegments(spi, stream_id);
  ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
  constexpr int kColumns = store::streams::kRingSegmentsColumns;
  if (rsinfo->setDesc->natts != kColumns) {
    pg::Raise(ERRCODE_INTERNAL_ERROR, "result has an unexpected shape");
  }
  const Oid me = GetUserId();
  for (uint64 row = 0; row < rows.size(); ++row) {
    const int32 id = rows.Int32(row, store::streams::kRingSegmentsStreamId);
    if (!api::HoldsStreamRight(spi, me, id, core::kAllRights)) continue;
    Datum values[kColumns];
    bool nulls[kColumns];
    for (int column = 1; column <= kColumns; ++column) {
      values[column - 1] = rows.Value(row, column, &nulls[column - 1]);
    }
    pg::Guard([&] { tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls); });
  }
  return static_cast<Datum>(0);
}
