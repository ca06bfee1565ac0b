// Completions counted: pgq.finished (store/queues.h), which done_recent and
// the overview read. Preloaded, completions are counted in shared memory
// (pg/ledger.h) and maintenance writes one row per queue and pass; without
// preload, each completing statement writes its own row.
#include "pg/ledger.h"
#include "pg/settings.h"
#include "store/internal.h"
#include "store/queues.h"

namespace pgq::store {

namespace {

pg::Statement insert_finished = {
    "INSERT INTO pgq.finished (queue_id, finished_at, jobs) VALUES ($1, $2, $3)",
    3,
    {INT4OID, TIMESTAMPTZOID, INT4OID},
    nullptr};

// Completions counted in shared memory (pg/queue_slots.h), one row per
// queue and pass; a queue dropped meanwhile gets none.
pg::Statement flush_finished = {
    "INSERT INTO pgq.finished (queue_id, finished_at, jobs)"
    " SELECT q.queue_id, $2, $3 FROM pgq.queues q WHERE q.queue_id = $1",
    3,
    {INT4OID, TIMESTAMPTZOID, INT8OID},
    nullptr};

// Returns the rows deleted and the jobs they counted.
pg::Statement drop_finished = {
    "WITH gone AS ("
    "  DELETE FROM pgq.finished WHERE ctid = ANY (ARRAY("
    "    SELECT ctid FROM pgq.finished WHERE queue_id = $1 AND finished_at < $2 LIMIT $3))"
    "  RETURNING jobs"
    ") SELECT count(*) AS rows, COALESCE(sum(jobs), 0) AS jobs FROM gone",
    3,
    {INT4OID, TIMESTAMPTZOID, INT4OID},
    nullptr};

pg::Statement delete_queue_done = {
    "DELETE FROM pgq.finished WHERE queue_id = $1", 1, {INT4OID}, nullptr};

}  // namespace

namespace internal {

void CountFinished(pg::SpiSession& spi, int32 queue_id, int32 jobs) {
  pg::ledger::NoteUnfinished(queue_id, -static_cast<int64>(jobs));
  if (pg::ledger::NoteFinished(queue_id, static_cast<uint64>(jobs))) return;
  pg::Params params;
  params.Set(0, Int32GetDatum(queue_id))
      .Set(1, TimestampTzGetDatum(pg::Now()))
      .Set(2, Int32GetDatum(jobs));
  spi.Execute(insert_finished, params);
}

void CountDead(int32 queue_id) {
  pg::ledger::NoteCount(queue_id, pg::kDeadLettered, 1);
  pg::ledger::NoteUnfinished(queue_id, -1);
}

}  // namespace internal

void FlushFinished(pg::SpiSession& spi, int32 queue_id, TimestampTz now, int64 jobs) {
  pg::Params params;
  params.Set(0, Int32GetDatum(queue_id))
      .Set(1, TimestampTzGetDatum(now))
      .Set(2, Int64GetDatum(jobs));
  spi.Execute(flush_finished, params);
}

FinishedDropped DropOldFinished(pg::SpiSession& spi, int32 queue_id, TimestampTz before,
                                int32 limit) {
  pg::Params params;
  params.Set(0, Int32GetDatum(queue_id))
      .Set(1, TimestampTzGetDatum(before))
      .Set(2, Int32GetDatum(limit));
  const pg::Result dropped = spi.Execute(drop_finished, params);
  return FinishedDropped{dropped.Int64(0, "rows"), dropped.Int64(0, "jobs")};
}

void ForgetFinished(pg::SpiSession& spi, int32 queue_id) {
  pg::Params by_id;
  by_id.Set(0, Int32GetDatum(queue_id));
  spi.Execute(delete_queue_done, by_id);
}

}  // namespace pgq::store
