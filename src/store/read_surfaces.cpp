// The statements of the read surfaces (store/read_surfaces.h).
#include "store/read_surfaces.h"

#include <algorithm>

#include "pg/args.h"
#include "store/internal.h"
#include "store/ring_jobs.h"

extern "C" {
#include "catalog/pg_type.h"
#include "utils/array.h"
}

namespace pgq::store {

namespace {

// $1 every queue, $2 the queue ids (int4[]), $3 one queue's id (NULL: all).
// The columns of pgq.queue_settings, in its order.
pg::Statement read_queue_settings = {
    "SELECT q.name, q.max_attempts, q.lease, q.backoff_base, q.backoff_max, q.retention,"
    "       q.keep_completed, q.keep_dead, q.notify, q.rate_limit, q.max_running,"
    "       q.group_concurrency, q.handler, q.owner, q.paused, q.created_at, q.fairness,"
    "       q.rate_limit_per_key, q.max_pending"
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
// The running jobs of the queues' rings likewise, their claimer from the
// claim's receipt: given as arrays ($5 queue ids, $6 claimers, $7 claim
// times, $8 leases), read from the lease map (pg/job_ring.h RunningJobs),
// not from the rings.
pg::Statement read_queue_workers = {
    // One row per claimer, its rows and ring jobs counted together.
    "SELECT q.name, j.claimed_by, a.usename, a.application_name, a.client_addr,"
    "       a.pid IS NOT NULL, a.backend_start, pg_catalog.count(*),"
    "       pg_catalog.min(j.claimed_at), pg_catalog.max(j.claimed_at),"
    "       pg_catalog.count(*) FILTER (WHERE j.lease_until < $4)"
    "  FROM (SELECT r.queue_id, r.claimed_by, r.claimed_at, r.lease_until FROM pgq.job_rows r"
    "         WHERE r.state = 'r' AND ($1 OR r.queue_id = ANY ($2))"
    "           AND ($3 IS NULL OR r.queue_id = $3)"
    "        UNION ALL"
    "        SELECT g.queue_id, g.claimed_by, g.claimed_at, g.lease_until"
    "          FROM ROWS FROM (pg_catalog.unnest($5), pg_catalog.unnest($6),"
    "                          pg_catalog.unnest($7), pg_catalog.unnest($8))"
    "               AS g(queue_id, claimed_by, claimed_at, lease_until)"
    "         WHERE ($1 OR g.queue_id = ANY ($2)) AND ($3 IS NULL OR g.queue_id = $3)) j"
    "  JOIN pgq.queues q ON q.queue_id = j.queue_id"
    "  LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = j.claimed_by"
    "        AND (a.backend_start IS NULL OR a.backend_start <= j.claimed_at)"
    " GROUP BY q.name, j.claimed_by, a.pid, a.usename, a.application_name, a.client_addr,"
    "          a.backend_start"
    " ORDER BY 1, 9, 2",
    8,
    {BOOLOID, INT4ARRAYOID, INT4OID, TIMESTAMPTZOID, INT4ARRAYOID, INT4ARRAYOID,
     TIMESTAMPTZARRAYOID, TIMESTAMPTZARRAYOID},
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

// The queue ids of `scope`, sorted (none when it is every queue).
std::vector<int32> ScopeIds(const Scope& scope) {
  std::vector<int32> ids;
  if (scope.every || scope.ids == 0) return ids;
  Datum* elements = nullptr;
  bool* nulls = nullptr;
  int count = 0;
  pg::Guard([&] {
    deconstruct_array(DatumGetArrayTypeP(scope.ids), INT4OID, sizeof(int32), true, TYPALIGN_INT,
                      &elements, &nulls, &count);
  });
  // Outside Guard: an allocation's exception must not cross its frame.
  ids.reserve(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) ids.push_back(DatumGetInt32(elements[i]));
  std::sort(ids.begin(), ids.end());
  return ids;
}

pg::Params& SetFilter(pg::Params& params, const Scope& scope, std::optional<int32> queue_id) {
  internal::SetScope(params, 0, scope);
  return params.SetOptional(2, !queue_id, Int32GetDatum(queue_id.value_or(0)));
}

pg::Result ReadCoordination(pg::SpiSession& spi, pg::Statement& statement,
                            std::optional<std::string_view> name, int32 max) {
  pg::Params params;
  params.SetOptional(0, !name, name ? pg::TextDatum(*name) : static_cast<Datum>(0))
      .Set(1, Int32GetDatum(max));
  return spi.Execute(statement, params);
}

}  // namespace

pg::Result ReadQueueSettings(pg::SpiSession& spi, const Scope& scope,
                             std::optional<int32> queue_id) {
  pg::Params params;
  SetFilter(params, scope, queue_id);
  return spi.Execute(read_queue_settings, params);
}

std::vector<pg::job_ring::RunningJob> RingRunningJobs(pg::SpiSession& spi, const Scope& scope,
                                                      std::optional<int32> queue_id) {
  const std::vector<int32> allowed = ScopeIds(scope);
  // A role with no right on any queue walks nothing: the walk holds the
  // lease map's locks, which every claim and completion takes.
  if (!scope.every && allowed.empty()) return {};
  // After a start, the leases are in the map once the lanes are built.
  ring::EnsureLanes(spi);
  return pg::job_ring::RunningJobs([&](int32 of) {
    return (!queue_id || *queue_id == of) &&
           (scope.every || std::binary_search(allowed.begin(), allowed.end(), of));
  });
}

pg::Result ReadQueueWorkers(pg::SpiSession& spi, const Scope& scope, std::optional<int32> queue_id,
                            TimestampTz now) {
  const std::vector<pg::job_ring::RunningJob> running = RingRunningJobs(spi, scope, queue_id);
  const int count = static_cast<int>(running.size());
  std::vector<Datum> queues(running.size()), claimers(running.size()), claimed(running.size()),
      leases(running.size());
  for (size_t i = 0; i < running.size(); ++i) {
    queues[i] = Int32GetDatum(running[i].lease.queue_id);
    claimers[i] = Int32GetDatum(running[i].lease.claimed_by);
    claimed[i] = TimestampTzGetDatum(running[i].lease.claimed_at);
    leases[i] = TimestampTzGetDatum(running[i].lease.lease_until);
  }
  pg::Params params;
  SetFilter(params, scope, queue_id).Set(3, TimestampTzGetDatum(now));
  pg::Guard([&] {
    params
        .Set(4, PointerGetDatum(construct_array(queues.data(), count, INT4OID, sizeof(int32), true,
                                                TYPALIGN_INT)))
        .Set(5, PointerGetDatum(construct_array(claimers.data(), count, INT4OID, sizeof(int32),
                                                true, TYPALIGN_INT)))
        .Set(6, PointerGetDatum(construct_array(claimed.data(), count, TIMESTAMPTZOID,
                                                sizeof(TimestampTz), true, TYPALIGN_DOUBLE)))
        .Set(7, PointerGetDatum(construct_array(leases.data(), count, TIMESTAMPTZOID,
                                                sizeof(TimestampTz), true, TYPALIGN_DOUBLE)));
  });
  return spi.Execute(read_queue_workers, params);
}

pg::Result ReadScheduleRuns(pg::SpiSession& spi, const Scope& scope, std::optional<int32> queue_id,
                            std::optional<std::string_view> schedule, int32 max) {
  pg::Params params;
  SetFilter(params, scope, queue_id)
      .SetOptional(3, !schedule, schedule ? pg::TextDatum(*schedule) : static_cast<Datum>(0))
      .Set(4, Int32GetDatum(max));
  return spi.Execute(read_schedule_runs, params);
}

pg::Result ReadTeams(pg::SpiSession& spi, std::optional<std::string_view> team, int32 max) {
  return ReadCoordination(spi, read_teams, team, max);
}

pg::Result ReadSwitches(pg::SpiSession& spi, std::optional<std::string_view> name, int32 max) {
  return ReadCoordination(spi, read_switches, name, max);
}

pg::Result ReadLadders(pg::SpiSession& spi, std::optional<std::string_view> subject, int32 max) {
  return ReadCoordination(spi, read_ladders, subject, max);
}

}  // namespace pgq::store
