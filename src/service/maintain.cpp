// One maintenance pass in the current database, a bounded batch per call:
// what pgq.maintain() and the maintenance worker run (service/maintain.h).
#include "service/maintain.h"

#include "pg/ledger.h"
#include "pg/queue_slots.h"
#include "pg/segments.h"
#include "pg/settings.h"
#include "pg/spi.h"
#include "service/backpressure.h"
#include "service/schedules.h"
#include "store/grants.h"
#include "store/jobs.h"
#include "store/outbox.h"
#include "store/queues.h"
#include "store/schedules.h"
#include "store/ring_jobs.h"
#include "store/streams.h"

namespace pgq::service {

namespace {

// Each statement handles a bounded batch, so a pass over a huge backlog is a
// series of small statements rather than one giant one.
constexpr int32 kBatch = 5000;
// Dropped rings whose tables a pass drops (a DROP each, with its catalog rows).
constexpr int kRingDrops = 100;
// Firing a schedule is a few statements; keep a batch's transaction short.
constexpr int32 kScheduleBatch = 100;

// Claim hints are exact for every change pgq_cpp makes (core/claim_hint.h).
// Changes it cannot see (a hand-written UPDATE of pgq.job_rows, a prepared
// transaction committed later) are found at the latest this long after, when
// a pass resets the hints of its database.
constexpr int64 kHintRefreshMicros = 60 * USECS_PER_SEC;
TimestampTz last_hint_reset = 0;

// A queue with a max_pending is counted by the first pass after a start
// (before its first producer has to), and its kept count is checked against
// the tables every hour (ADR 0029, "Backpressure, as built"): a drift
// (a ROLLBACK PREPARED of a transaction that made or finished jobs, a
// change pgq_cpp cannot see) is logged and corrected.
constexpr int64 kPendingCheckMicros = 3600 * USECS_PER_SEC;
TimestampTz last_pending_check = 0;

void TendPendingCounts(pg::SpiSession& spi) {
  const TimestampTz wall = GetCurrentTimestamp();
  // The first check an hour after this backend's first pass: a count not
  // made since the start is made at once anyway (state unknown).
  if (last_pending_check == 0) last_pending_check = wall;
  const bool check = wall - last_pending_check >= kPendingCheckMicros || wall < last_pending_check;
  if (check) last_pending_check = wall;
  for (const auto& [queue_id, name] : store::QueuesWithMaxPending(spi)) {
    pg::QueueSlot* slot = pg::FindQueueSlot(queue_id);
    if (slot == nullptr) continue;
    // A count whose backend ended without closing it is given up here.
    (void)pg::TakeOverDeadCount(slot);
    const core::PendingCount now = pg::ReadPendingCount(slot);
    if (now.window || (now.state == core::PendingCount::kKnown && !check)) continue;
    const std::optional<core::CountResult> counted = CountPending(spi, queue_id);
    if (counted && counted->was_known && counted->kept != counted->found) {
      const std::string message = "pgq: the unfinished jobs of queue \"" + name +
                                  "\" were kept as " + std::to_string(counted->kept) +
                                  " and counted " + std::to_string(counted->found) + "; corrected";
      pg::Guard([&] { ereport(WARNING, (errmsg_internal("%s", message.c_str()))); });
    }
  }
}

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
    store::DropOrphanGrants(spi);
    store::DropOrphanTopicGrants(spi);
    store::streams::DropOrphanGrants(spi);
  }

  TendPendingCounts(spi);

  pg::ledger::FlushFinishedCounts([&](int32 queue_id, uint64 jobs) {
    store::FlushFinished(spi, queue_id, now, static_cast<int64>(jobs));
  });

  // Retention is per queue; queues are few, finished jobs many.
  for (const store::QueueRetention& queue : store::QueueRetentions(spi)) {
    const store::FinishedDropped dropped =
        store::DropOldFinished(spi, queue.id, now - queue.retention_us, kBatch);
    counts.finished_dropped += dropped.jobs;
    if (dropped.rows == kBatch) *more = true;
  }

  // Dedupe periods past, followers left behind, the rings of completed and
  // dead jobs (ADR 0015).
  if (store::TendKeys(spi, now, kBatch).holds_dropped == kBatch) *more = true;
  store::TurnRings(spi, now);
  // Dependents of parents that died, past what their transaction did.
  if (store::TendDependencies(spi, now, kBatch) == kBatch) *more = true;

  // Recurring jobs and the outbox's history.
  store::RearmFinishedEverySchedules(spi, now);
  counts.schedules_fired = FireDueSchedules(spi, now, kScheduleBatch);
  if (counts.schedules_fired == kScheduleBatch) *more = true;
  if (store::DropOldScheduleRuns(spi, now, kBatch) == kBatch) *more = true;
  if (store::DropOldEvents(spi, now, kBatch) == kBatch) *more = true;

  // Streams: rings turned, segments every consumer has passed truncated.
  (void)store::streams::Maintain(spi, now);
  // Queues' rings: turned, segments whose jobs have all finished truncated.
  (void)store::ring::Maintain(spi, now);
  // Last, as it may lock a ring root exclusively until the pass commits:
  // the tables of dropped queues' and streams' rings.
  if (pg::segments::DropRetired(spi, kRingDrops) == kRingDrops) *more = true;
  return counts;
}

}  // namespace pgq::service
