// Dead-letter: cancel sends a job there; retry_dead brings jobs back with
// fresh attempts; purge_dead drops them. The moves are the jobs store's
// (store/dead.cpp).
#include "service/queue_ref.h"
#include "service/rights.h"
#include "pg/args.h"
#include "pg/queue_lock.h"
#include "pg/settings.h"
#include "store/jobs.h"

using namespace pgq;

// cancel(id): a job that has not finished goes to dead-letter with reason
// 'cancelled'; a running one's claim is fenced at once (its row is gone).
PGQ_FUNCTION(pgq_cancel) {
  const int64 id = pg::RequiredInt64(fcinfo, 0, "id");
  // A producer may take back what it sent, as may an admin.
  constexpr uint8 kMayCancel = core::kProduce | core::kAdmin;
  pg::SpiSession spi;
  // Only jobs of the caller's queues are found: one of another queue is
  // answered as one that does not exist (issue 15, L4).
  PG_RETURN_BOOL(store::Cancel(spi, service::RequireScope(spi, kMayCancel), id, pg::Now()));
}

// retry_dead(id): back to pending with fresh attempts.
PGQ_FUNCTION(pgq_retry_dead) {
  const int64 id = pg::RequiredInt64(fcinfo, 0, "id");
  pg::SpiSession spi;
  service::RequireRightSomewhere(spi, core::kAdmin);
  const int32 queue_id = store::QueueOfDeadJob(spi, id, pg::Now());
  if (queue_id == 0) PG_RETURN_BOOL(false);
  // A dead job of a queue the caller does not administer: as if it did not
  // exist (issue 15, L4).
  if (!service::HoldsRight(spi, GetUserId(), queue_id, core::kAdmin)) PG_RETURN_BOOL(false);
  pg::LockQueueShared(queue_id);  // the queue cannot be dropped under us now
  // Revived jobs wake waiting claims; LISTEN clients are told of new jobs only.
  PG_RETURN_BOOL(store::Revive(spi, {queue_id, {}, false}, id, pg::Now()) == 1);
}

// retry_dead(queue, max): up to max dead jobs of the queue, oldest first.
PGQ_FUNCTION(pgq_retry_dead_queue) {
  const std::string_view name = pg::QueueNameArg(fcinfo, 0);
  const int32 max = pg::ArgIsNull(fcinfo, 1) ? 1000 : PG_GETARG_INT32(1);
  if (max < 1) pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE, "max must be at least 1");
  pg::SpiSession spi;
  const service::QueueRef queue = service::FindQueueWithRight(spi, name, core::kAdmin);
  pg::LockQueueShared(queue.id);
  PG_RETURN_INT32(store::ReviveOldest(spi, {queue.id, name, false}, max, pg::Now()));
}

// purge_dead(queue, older_than): how many dead jobs it deleted. Routine
// retention is keep_dead, which drops them in bulk (ADR 0015); this is the
// operator's explicit clean-up.
PGQ_FUNCTION(pgq_purge_dead) {
  const std::string_view name = pg::QueueNameArg(fcinfo, 0);
  const int64 older_than_us =
      pg::ArgIsNull(fcinfo, 1) ? 0 : pg::SpanMicros(PG_GETARG_INTERVAL_P(1), "older_than");
  pg::SpiSession spi;
  (void)service::FindQueueWithRight(spi, name, core::kAdmin);
  PG_RETURN_INT64(
      store::PurgeDead(spi, name, pg::AddMicros(pg::Now(), -older_than_us, "older_than")));
}
