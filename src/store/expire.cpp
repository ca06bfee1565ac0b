// Leases that ran out (the maintenance pass).
//
// An expired lease counts as a failed attempt. The job is ready again at
// once, in its old place in the claim order (run_at is unchanged): it already
// waited a whole lease. It keeps lease_until (the marker that lets a late
// complete or fail from the expired claim still land) and its attempt number
// until the next claim. A job out of attempts is dead-lettered instead.
#include "pg/ledger.h"
#include "store/internal.h"
#include "store/ring_jobs.h"

namespace pgq::store {

namespace {

// $1 now, $2 batch. The running jobs' index leads with the queue (a capped
// claim counts by it): the expired leases are found queue by queue, at most
// $2 of each.
std::string ExpiredLeases(std::string_view attempts_left) {
  std::string sql = R"sql(SELECT e.id FROM pgq.queues q CROSS JOIN LATERAL (
    SELECT j.id FROM pgq.job_rows j
     WHERE j.queue_id = q.queue_id AND j.state = 'r' AND j.lease_until < $1 AND )sql";
  sql += attempts_left;
  sql += "\n     ORDER BY j.lease_until LIMIT $2 FOR UPDATE OF j SKIP LOCKED) e";
  return sql;
}

pg::Statement& expire_to_pending() {
  const auto sql = [] {
    return "UPDATE pgq.job_rows SET state = 'p', last_error = 'lease expired'\n WHERE id = ANY "
           "(ARRAY(" +
           ExpiredLeases("j.attempt < j.max_attempts") + "))\nRETURNING queue_id";
  };
  static internal::BuiltStatement statement{sql(), {TIMESTAMPTZOID, INT4OID}};
  return statement.get();
}

pg::Statement& expire_to_dead() {
  const auto dead = [] {
    return "DELETE FROM pgq.job_rows WHERE id = ANY (ARRAY(" +
           ExpiredLeases("j.attempt >= j.max_attempts") + "))\nRETURNING *";
  };
  static internal::BuiltStatement statement{
      internal::BurySql(dead(), "'lease expired'", "expired", "$1"), {TIMESTAMPTZOID, INT4OID}};
  return statement.get();
}

// Counts the leases a statement expired (their queue ids in column
// queue_id, one row each) for pgq.metrics(); with `dead`, the jobs it
// dead-lettered too.
void CountExpiries(const pg::Result& expired, bool dead) {
  if (expired.empty()) return;
  const int queue_column = expired.ColumnNumber("queue_id");
  for (uint64 row = 0; row < expired.size(); ++row) {
    const int32 queue_id = expired.Int32(row, queue_column);
    pg::ledger::NoteCount(queue_id, pg::kLeaseExpiries, 1);
    if (dead) internal::CountDead(queue_id);
    pg::ledger::NoteLeftRunning(queue_id);
  }
}

}  // namespace

Expired ExpireLeases(pg::SpiSession& spi, TimestampTz now, int32 batch) {
  // Ring jobs whose lease ended, as the rows' below (ADR 0028).
  const Expired on_rings = ring::ExpireOnRings(spi, now, batch);
  pg::Params params;
  params.Set(0, TimestampTzGetDatum(now)).Set(1, Int32GetDatum(batch));
  const pg::Result requeued = spi.Execute(expire_to_pending(), params);
  CountExpiries(requeued, false);
  // Claims waiting on those queues look again when this commits; the
  // statement does not say which job of each comes first, so every hint of
  // the database is reset.
  if (!requeued.empty()) pg::ledger::NoteReadyInDatabase();
  const pg::Result dead = spi.Execute(expire_to_dead(), params);
  CountExpiries(dead, true);
  internal::MoveGroupsOn(spi, internal::GroupsOf(dead, internal::KeysReleased(spi, dead, now)));
  internal::ParentsDied(spi, dead, now);
  return Expired{on_rings.requeued + static_cast<int64>(requeued.size()),
                 on_rings.dead + static_cast<int64>(dead.size())};
}

}  // namespace pgq::store
