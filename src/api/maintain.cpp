// pgq.maintain(): one maintenance pass in the calling database. The
// background worker runs the same pass; without it, call this from cron.
#include "api/maintain.h"

#include "store/streams.h"

#include "api/compact.h"
#include "api/outbox.h"
#include "api/rights.h"
#include "api/topics.h"
#include "api/schedules.h"
#include "pg/ledger.h"
#include "pg/allocator.h"
#include "pg/args.h"
#include "pg/queue_slots.h"
#include "pg/settings.h"
#include "pg/spi.h"
#include "store/jobs.h"

namespace pgq::api {

namespace {

// Each statement handles a bounded batch, so a pass over a huge backlog is a
// series of small statements rather than one giant one.
constexpr int32 kBatch = 5000;
// Firing a schedule is a few statements; keep a batch's transaction short.
constexpr int32 kScheduleBatch = 100;

// Claim hints are exact for every change pgq_cpp makes (core/claim_hint.h).
// Changes it cannot see (a hand-written UPDATE of pgq.jobs, a prepared
// transaction committed later) are found at the latest this long after, when
// a pass resets the hints of its database.
constexpr int64 kHintRefreshMicros = 60 * USECS_PER_SEC;
TimestampTz last_hint_reset = 0;

// Grants of roles dropped since: they grant nothing (no current role has a
// dropped role's privileges), and are deleted before the OID could ever
// name another role.
pg::Statement drop_orphan_grants = {
    "DELETE FROM pgq.grants g"
    " WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.oid = g.role::oid)",
    0,
    {},
    nullptr};

// The same for topic grants.
pg::Statement drop_orphan_topic_grants = {
    "DELETE FROM pgq.topic_grants g"
    " WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.oid = g.role::oid)",
    0,
    {},
    nullptr};

pg::Statement drop_orphan_stream_grants = {
    "DELETE FROM pgq.stream_grants g"
    " WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.oid = g.role::oid)",
    0,
    {},
    nullptr};

// Completions counted in shared memory (pg/queue_slots.h), one row per
// queue and pass; a queue dropped meanwhile gets none.
pg::Statement flush_finished = {
    "INSERT INTO pgq.finished (queue_id, finished_at, jobs)"
    " SELECT q.queue_id, $2, $3 FROM pgq.queues q WHERE q.queue_id = $1",
    3,
    {INT4OID, TIMESTAMPTZOID, INT8OID},
    nullptr};

pg::Statement list_retention = {
    "SELECT queue_id, retention FROM pgq.queues ORDER BY queue_id", 0, {}, nullptr};

// Returns the rows deleted and the jobs they counted.
pg::Statement drop_finished = {
    "WITH gone AS ("
    "  DELETE FROM pgq.finished WHERE ctid = ANY (ARRAY("
    "    SELECT ctid FROM pgq.finished WHERE queue_id = $1 AND finished_at < $2 LIMIT $3))"
    "  RETURNING jobs"
    ") SELECT count(*), COALESCE(sum(jobs), 0) FROM gone",
    3,
    {INT4OID, TIMESTAMPTZOID, INT4OID},
    nullptr};

}  // namespace

PassCounts RunMaintenanceBatch(TimestampTz now, bool* more) {
  PassCounts counts;
  *more = false;
  pg::SpiSession spi;
  const store::Expired expired = store::ExpireLeases(spi, now, kBatch);
  counts.expired_requeued = expired.requeued;
  counts.expired_dead = expired.dead;
  *more = counts.expired_requeued == kBatch || counts.expired_dead == kBatch;
  const TimestampTz wall = GetCurrentTimestamp();
  if (wall - last_hint_reset >= kHintRefreshMicros || wall < last_hint_reset) {
    pg::Guard([] { pg::ResetDatabaseSlots(false); });
    last_hint_reset = wall;
    pg::Params none;
    spi.Execute(drop_orphan_grants, none);
    spi.Execute(drop_orphan_topic_grants, none);
    spi.Execute(drop_orphan_stream_grants, none);
  }

  pg::ledger::FlushFinishedCounts([&](int32 queue_id, uint64 jobs) {
    pg::Params params;
    params.Set(0, Int32GetDatum(queue_id))
        .Set(1, TimestampTzGetDatum(now))
        .Set(2, Int64GetDatum(static_cast<int64>(jobs)));
    spi.Execute(flush_finished, params);
  });

  // Retention is per queue; queues are few, finished jobs many.
  pg::Params none;
  const pg::Result queues = spi.Execute(list_retention, none);
  for (uint64 row = 0; row < queues.size(); ++row) {
    bool is_null = false;
    const int64 keep =
        pg::IntervalMicros(DatumGetIntervalP(queues.Value(row, 2, &is_null)), "retention");
    pg::Params params;
    params.Set(0, Int32GetDatum(queues.Int32(row, 1)))
        .Set(1, TimestampTzGetDatum(now - keep))
        .Set(2, Int32GetDatum(kBatch));
    const pg::Result dropped = spi.Execute(drop_finished, params);
    counts.finished_dropped += dropped.Int64(0, 2);
    if (dropped.Int64(0, 1) == kBatch) *more = true;
  }

  // Dedupe periods past, followers left behind, the rings of completed and
  // dead jobs (ADR 0015).
  if (store::TendKeys(spi, now, kBatch).holds_dropped == kBatch) *more = true;
  store::TurnRings(spi, now);
  // Dependents of parents that died, past what their transaction did.
  if (store::TendDependencies(spi, now, kBatch) == kBatch) *more = true;

  // Recurring jobs and the outbox's history.
  RearmFinishedEverySchedules(spi, now);
  counts.schedules_fired = FireDueSchedules(spi, now, kScheduleBatch);
  if (counts.schedules_fired == kScheduleBatch) *more = true;
  if (DropOldScheduleRuns(spi, now, kBatch) == kBatch) *more = true;
  if (DropOldEvents(spi, now, kBatch) == kBatch) *more = true;

  // Streams: rings turned, segments every consumer has passed truncated.
  (void)store::streams::Maintain(spi, now);
  return counts;
}

}  // namespace pgq::api

using namespace pgq;

// maintain() returns (expired_requeued, expired_dead, finished_dropped, schedules_fired)
PGQ_FUNCTION(pgq_maintain) {
  {
    pg::SpiSession spi;
    api::RequireRightOnEveryQueue(spi, core::kAdmin, "run maintenance");
  }
  // One statement's clock for the whole pass, as the worker does.
  const TimestampTz now = pg::Now();
  api::PassCounts counts;
  for (bool more = true; more;) counts += api::RunMaintenanceBatch(now, &more);
  // Compacting holds pgq.jobs exclusively until the caller commits: only
  // when that is the end of this statement, and never from an old snapshot.
  if (!IsTransactionBlock() && !IsolationUsesXactSnapshot()) api::MaybeCompactJobs();
  TupleDesc desc = nullptr;
  pg::Guard([&] {
    if (get_call_result_type(fcinfo, nullptr, &desc) != TYPEFUNC_COMPOSITE) {
      elog(ERROR, "pgq.maintain must return a composite type");
    }
    desc = BlessTupleDesc(desc);
  });
  Datum values[4] = {Int64GetDatum(counts.expired_requeued), Int64GetDatum(counts.expired_dead),
                     Int64GetDatum(counts.finished_dropped), Int64GetDatum(counts.schedules_fired)};
  bool nulls[4] = {false, false, false, false};
  return pg::Guard([&] { return HeapTupleGetDatum(heap_form_tuple(desc, values, nulls)); });
}

// unflushed_completions(queue_id) returns bigint
PGQ_FUNCTION(pgq_unflushed_completions) {
  const int32 queue_id = pg::RequiredInt32(fcinfo, 0, "queue_id");
  {
    pg::SpiSession spi;
    api::RequireRightOnQueueId(spi, queue_id, core::kAllRights);
  }
  PG_RETURN_INT64(static_cast<int64>(pg::UnflushedFinished(queue_id)));
}
