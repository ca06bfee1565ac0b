// cancel_job and retry_dead_job (3.0): cancel and retry_dead that say why
// nothing happened, for the dashboard's buttons and for scripts; and
// purge_dead_job, which deletes one dead job (the dashboard's bulk purge). The
// boolean cancel and retry_dead keep their contract; these do the same
// move, then, when it did not happen, read the job as the caller may see
// it and name its state.
//
// Rights are those of the boolean functions: produce or admin to cancel,
// admin to retry and to purge (as purge_dead). A job of a queue the caller holds none of them on is
// answered 'not_found', exactly like an unknown id (issue 15, L4): the
// answer tells a role nothing about queues it has no right on.
#include <string>

#include "service/rights.h"
#include "pg/args.h"
#include "pg/queue_lock.h"
#include "pg/settings.h"
#include "store/jobs.h"

namespace pgq::api {

namespace {

// What stands in the way of the move, as the caller may see it: the job's
// pgq.job_info state, or "" when it is not found (unknown id, dropped by
// its queue's retention, or of a queue the caller holds none of `wanted`
// on).
std::string VisibleState(pg::SpiSession& spi, int64 id, uint8 wanted) {
  const pg::Result job = store::ReadJob(spi, id, pg::Now(), service::QueuesWithRight(spi, wanted));
  if (job.empty()) return {};
  if (!service::HoldsRight(spi, GetUserId(), job.Int32(0, "queue_id"), wanted)) return {};
  return job.Text(0, "state");
}

std::string CancelOutcome(pg::SpiSession& spi, int64 id) {
  // A producer may take back what it sent, as may an admin (as cancel).
  constexpr uint8 kMayCancel = core::kProduce | core::kAdmin;
  const service::QueueScope scope = service::RequireScope(spi, kMayCancel);
  // Each statement reads a new snapshot (READ COMMITTED): a job that moved
  // between cancel's statements and this read (a follower of a dedupe key
  // promoted into pgq.job_rows as its holder finished) is live when read, and
  // the next try finds it where it went. A job moves that way once, so a
  // second try settles it; the third is a margin.
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (store::Cancel(spi, scope, id, pg::Now())) return "cancelled";
    const std::string state = VisibleState(spi, id, kMayCancel);
    if (state.empty()) return "not_found";
    if (state == "done") return "already_completed";
    if (state == "dead") return "already_dead";
    if (state == "cancelled") return "already_cancelled";
  }
  return "not_found";
}

// The queue of dead job `id` when the caller may administer it, with the
// queue's share lock taken (it cannot be dropped under us now); 0 when the
// job is not dead or its queue is not the caller's to administer.
int32 AdministeredDeadJobQueue(pg::SpiSession& spi, int64 id) {
  const int32 queue_id = store::QueueOfDeadJob(spi, id, pg::Now());
  if (queue_id == 0 || !service::HoldsRight(spi, GetUserId(), queue_id, core::kAdmin)) return 0;
  pg::LockQueueShared(queue_id);
  return queue_id;
}

std::string RetryOutcome(pg::SpiSession& spi, int64 id) {
  service::RequireRightSomewhere(spi, core::kAdmin);
  const int32 queue_id = AdministeredDeadJobQueue(spi, id);
  if (queue_id != 0) {
    if (store::Revive(spi, {queue_id, {}, false}, id, pg::Now()) == 1) return "retried";
    // Still dead: a live job holds its dedupe key (retry_dead's rule).
    if (store::QueueOfDeadJob(spi, id, pg::Now()) == queue_id) return "dedupe_key_taken";
  }
  const std::string state = VisibleState(spi, id, core::kAdmin);
  if (state.empty()) return "not_found";
  if (state == "done") return "already_completed";
  // Scheduled, ready, waiting or running: it has not died (or was retried
  // by someone else first).
  return "not_dead";
}

std::string PurgeOutcome(pg::SpiSession& spi, int64 id) {
  service::RequireRightSomewhere(spi, core::kAdmin);
  const int32 queue_id = AdministeredDeadJobQueue(spi, id);
  if (queue_id != 0) {
    if (store::PurgeDeadJob(spi, queue_id, id)) return "purged";
    // Gone between the two statements: retried or purged by another session.
  }
  const std::string state = VisibleState(spi, id, core::kAdmin);
  if (state.empty()) return "not_found";
  // Scheduled, ready, waiting, running or done: only dead jobs are purged
  // (a done job leaves with its queue's keep_completed).
  return "not_dead";
}

// A function of one job id that answers with a word: `outcome`'s, run
// in an SPI session of its own.
Datum OutcomeOf(FunctionCallInfo fcinfo, std::string (*outcome)(pg::SpiSession&, int64)) {
  const int64 id = pg::RequiredInt64(fcinfo, 0, "id");
  std::string word;
  {
    pg::SpiSession spi;
    word = outcome(spi, id);
  }
  return pg::TextDatum(word);
}

}  // namespace

}  // namespace pgq::api

using namespace pgq;

// cancel_job(id) returns text: cancelled, not_found, already_completed,
// already_dead or already_cancelled.
PGQ_FUNCTION(pgq_cancel_job) { return api::OutcomeOf(fcinfo, api::CancelOutcome); }

// retry_dead_job(id) returns text: retried, not_found, not_dead,
// already_completed or dedupe_key_taken.
PGQ_FUNCTION(pgq_retry_dead_job) { return api::OutcomeOf(fcinfo, api::RetryOutcome); }

// purge_dead_job(id) returns text: purged, not_found or not_dead.
PGQ_FUNCTION(pgq_purge_dead_job) { return api::OutcomeOf(fcinfo, api::PurgeOutcome); }
