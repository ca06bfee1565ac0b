// Dead-letter: cancel sends a pending job there; retry_dead brings jobs back
// with fresh attempts.
#include "api/groups.h"
#include "api/job_sql.h"
#include "api/queue_ref.h"
#include "api/rights.h"
#include "pg/ledger.h"
#include "pg/args.h"
#include "pg/queue_lock.h"
#include "pg/settings.h"

namespace pgq::api {

namespace {

pg::Statement cancel_job = {
    "WITH d AS ("
    "  DELETE FROM pgq.jobs WHERE id = $1 AND state IN ('p', 'w')"
    "     AND ($3 OR queue_id = ANY ($4)) RETURNING *"
    ") " PGQ_BURY_DELETED("d.last_error", "cancelled", "$2"),
    4,
    {INT8OID, TIMESTAMPTZOID, BOOLOID, INT4ARRAYOID},
    nullptr};

pg::Statement queue_of_dead_job = {
    "SELECT q.queue_id FROM pgq.dead_jobs d JOIN pgq.queues q ON q.name = d.queue "
    " WHERE d.id = $1",
    1,
    {INT8OID},
    nullptr};

// A dead job whose dedupe key is held again by a live job stays dead: two
// live jobs with one key is what dedupe exists to prevent.
#define PGQ_DEDUPE_FREE                   \
  "(d.dedupe_key IS NULL OR NOT EXISTS (" \
  "   SELECT 1 FROM pgq.jobs j WHERE j.queue_id = $2 AND j.dedupe_key = d.dedupe_key))"

// A job of a FIFO group comes back waiting; its group then moves on
// (api/groups.h), which makes it pending if its group has nothing else.
// Returns, per job: queue id, group key, claim key (priority, run_at, id).
#define PGQ_REVIVE                                                                         \
  "INSERT INTO pgq.jobs (id, queue_id, state, priority, run_at, attempt, max_attempts, "   \
  "                      enqueued_at, dedupe_key, group_key, last_error, payload) "        \
  "SELECT r.id, $2, CASE WHEN r.group_key IS NULL THEN 'p' ELSE 'w' END, r.priority, $3, " \
  "       0, r.max_attempts, r.enqueued_at, "                                              \
  "       r.dedupe_key, r.group_key, r.last_error, r.payload FROM revived r "              \
  "RETURNING queue_id, group_key, priority, run_at, id"

pg::Statement retry_dead_job = {
    "WITH revived AS ("
    "  DELETE FROM pgq.dead_jobs d WHERE d.id = $1 AND " PGQ_DEDUPE_FREE
    " RETURNING d.*"
    ") " PGQ_REVIVE,
    3,
    {INT8OID, INT4OID, TIMESTAMPTZOID},
    nullptr};

pg::Statement retry_dead_jobs = {
    "WITH revived AS ("
    "  DELETE FROM pgq.dead_jobs dd WHERE dd.id = ANY (ARRAY("
    "    SELECT d.id FROM pgq.dead_jobs d WHERE d.queue = $1 AND " PGQ_DEDUPE_FREE
    // Of dead jobs sharing a key, only the oldest comes back.
    "       AND NOT EXISTS (SELECT 1 FROM pgq.dead_jobs o WHERE o.queue = d.queue"
    "                          AND o.dedupe_key = d.dedupe_key AND o.id < d.id)"
    "     ORDER BY d.id LIMIT $4 FOR UPDATE SKIP LOCKED))"
    "  RETURNING dd.*"
    ") " PGQ_REVIVE,
    4,
    {TEXTOID, INT4OID, TIMESTAMPTZOID, INT4OID},
    nullptr};

// After a revival: ungrouped jobs are pending (the hint comes back to the
// first of them), grouped ones move their group on.
void AnnounceRevived(pg::SpiSession& spi, int32 queue_id, const pg::Result& revived) {
  bool have_first = false;
  core::ClaimKey first = core::kFirstKey;
  for (uint64 row = 0; row < revived.size(); ++row) {
    if (!revived.IsNull(row, "group_key")) continue;  // grouped: its group moves on below
    const core::ClaimKey key = ClaimKeyOf(revived, row);
    first = have_first ? core::EarlierKey(first, key) : key;
    have_first = true;
  }
  if (have_first) pg::ledger::NotePending(queue_id, first, true);
  std::vector<GroupRef> groups = GroupsOfResult(revived);
  if (!groups.empty()) MoveGroupsOn(spi, std::move(groups));
}

}  // namespace

}  // namespace pgq::api

using namespace pgq;

// cancel(id): a pending job goes to dead-letter with reason 'cancelled'.
PGQ_FUNCTION(pgq_cancel) {
  const int64 id = pg::RequiredInt64(fcinfo, 0, "id");
  // A producer may take back what it sent, as may an admin.
  constexpr uint8 kMayCancel = core::kProduce | core::kAdmin;
  pg::SpiSession spi;
  api::RequireRightSomewhere(spi, kMayCancel);
  // Only jobs of the caller's queues are found: one of another queue is
  // answered as one that does not exist (issue 15, L4).
  pg::Params params;
  params.Set(0, Int64GetDatum(id)).Set(1, TimestampTzGetDatum(pg::Now()));
  api::SetScope(params, 2, api::QueuesWithRight(spi, kMayCancel));
  const pg::Result cancelled = spi.Execute(api::cancel_job, params);
  if (cancelled.empty()) PG_RETURN_BOOL(false);
  pg::ledger::NoteLocked(cancelled.Int32(0, 1));  // it locked a pending job
  pg::ledger::NoteCount(cancelled.Int32(0, 1), pg::kDeadLettered, 1);
  std::vector<api::GroupRef> groups = api::GroupsOfResult(cancelled);
  if (!groups.empty()) api::MoveGroupsOn(spi, std::move(groups));
  PG_RETURN_BOOL(true);
}

// retry_dead(id): back to pending with fresh attempts.
PGQ_FUNCTION(pgq_retry_dead) {
  const int64 id = pg::RequiredInt64(fcinfo, 0, "id");
  pg::SpiSession spi;
  api::RequireRightSomewhere(spi, core::kAdmin);
  pg::Params lookup;
  lookup.Set(0, Int64GetDatum(id));
  const pg::Result dead = spi.Execute(api::queue_of_dead_job, lookup, 1);
  if (dead.empty()) PG_RETURN_BOOL(false);
  const int32 queue_id = dead.Int32(0, 1);
  // A dead job of a queue the caller does not administer: as if it did not
  // exist (issue 15, L4).
  if (!api::HoldsRight(spi, GetUserId(), queue_id, core::kAdmin)) PG_RETURN_BOOL(false);
  pg::LockQueueShared(queue_id);  // the queue cannot be dropped under us now
  pg::Params params;
  params.Set(0, Int64GetDatum(id))
      .Set(1, Int32GetDatum(queue_id))
      .Set(2, TimestampTzGetDatum(pg::Now()));
  const pg::Result revived = spi.Execute(api::retry_dead_job, params);
  api::AnnounceRevived(spi, queue_id, revived);
  PG_RETURN_BOOL(revived.size() == 1);
}

// retry_dead(queue, max): up to max dead jobs of the queue, oldest first.
PGQ_FUNCTION(pgq_retry_dead_queue) {
  const std::string_view name = pg::QueueNameArg(fcinfo, 0);
  const int32 max = pg::ArgIsNull(fcinfo, 1) ? 1000 : PG_GETARG_INT32(1);
  if (max < 1) pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE, "max must be at least 1");
  pg::SpiSession spi;
  const api::QueueRef queue = api::FindQueue(spi, name);
  api::RequireRight(spi, queue.id, name, core::kAdmin);
  pg::LockQueueShared(queue.id);
  pg::Params params;
  params.Set(0, pg::TextDatum(name))
      .Set(1, Int32GetDatum(queue.id))
      .Set(2, TimestampTzGetDatum(pg::Now()))
      .Set(3, Int32GetDatum(max));
  const pg::Result revived = spi.Execute(api::retry_dead_jobs, params);
  api::AnnounceRevived(spi, queue.id, revived);
  PG_RETURN_INT32(static_cast<int32>(revived.size()));
}
