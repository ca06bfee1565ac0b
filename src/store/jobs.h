// The jobs store: the one owner of every statement that writes pgq.jobs or
// pgq.dead_jobs, of the FIFO groups' waiting state, and of the ledger notes
// (pg/ledger.h) each change needs at commit. The SQL functions (src/api)
// check arguments and rights and resolve queues; the workers (src/bgw) do the
// same as superuser; both then call the store, which never checks a right.
//
// What a caller may rely on:
//   - jobs made pending (insert, release, retry, revival, a group moving on)
//     lower the queue's claim hint and wake its waiting claims at commit;
//   - pending jobs a statement locks (claim, cancel, a late completion) reset
//     the hint if the transaction rolls back;
//   - claims, completions, failures and dead-letterings are counted for
//     pgq.metrics() and done_recent at commit;
//   - a job leaving its FIFO group's head moves the group on (the next one
//     becomes pending) under the group's lock, in (queue, key) order.
//
// Files: insert.cpp (every new job: enqueue, enqueue_many, publish,
// schedules, retry_dead, through one column list and one AfterInsert; a job
// with no dedupe key and no group as a row built beside it, ADR 0014),
// claim.cpp, finish.cpp (complete, fail), lease.cpp (extend, release), dead.cpp
// (cancel, dead-letter, revival), groups.cpp, expire.cpp (maintenance),
// queue_jobs.cpp (a queue's jobs as a whole: count, purge, gauges),
// catalog.cpp (which version of pgq's tables is installed).
//
// Every function runs in the caller's SpiSession; rows are read by the
// column names of the statement beside it. Outside the store, pgq.jobs is
// only read: by the views (SQL), and by the schedules' own statements,
// which ask whether a schedule's last job is still live (its overlap rule).
#pragma once

#include <optional>
#include <string_view>

#include "core/claim_hint.h"
#include "pg/queue_slots.h"
#include "pg/spi.h"

namespace pgq::store {

// The queue a change is for, as the caller resolved (and locked) it.
struct Queue {
  int32 id;
  std::string_view name;  // for NOTIFY
  bool notify;            // LISTEN pgq clients are told of new jobs
};

// The queues a caller may touch by job id: `every`, or those in `ids` (an
// int4[] Datum in memory that outlives the call). A job of any other queue
// is not found: answered as one that does not exist (issue 15, L4).
struct Scope {
  bool every;
  Datum ids;
};

// ---- New jobs (insert.cpp). The caller holds the queue's lock
// (pg/queue_lock.h) so it cannot be dropped before commit.

struct NewJob {
  Datum payload;  // jsonb
  TimestampTz run_at;
  int32 priority;
  int32 max_attempts;
  Datum dedupe_key;        // text, or 0: none
  Datum group_key;         // text, or 0: none (the group's lock is taken here)
  std::string_view group;  // the same key as a string, when group_key is set
};

// One job. Its id; nullopt when a live job of the queue holds `dedupe_key`
// (then DedupeHolder says which, unless it finished meanwhile).
std::optional<int64> Insert(pg::SpiSession& spi, const Queue& queue, const NewJob& job);
// The live job of `queue_id` holding `dedupe_key`, or 0.
int64 DedupeHolder(pg::SpiSession& spi, int32 queue_id, Datum dedupe_key);

// One job per payload of `payloads` (jsonb[]), their max_attempts the
// queue's. Rows: column "id", in no particular order (ids are drawn in
// input order). Empty if the queue no longer exists.
pg::Result InsertMany(pg::SpiSession& spi, const Queue& queue, Datum payloads, TimestampTz run_at,
                      int32 priority);

// One job per queue of `queues` that still exists, its payload the event
// envelope {event_id, topic, payload} (pgq.publish).
void InsertEvent(pg::SpiSession& spi, const Queue* queues, int count, int64 event_id, Datum topic,
                 Datum payload, TimestampTz run_at);

// ---- Claims (claim.cpp)

// One claim statement: up to `n` ready jobs of `queue_id`, leased until
// now + `lease`, from the claim hint of `slot` (nullptr: none) on. Rows: the
// columns of pgq.claimed_job (1-8, the queue's name from `name`), then
// run_at, in claim order.
pg::Result Claim(pg::SpiSession& spi, int32 queue_id, Datum name, int32 n, Datum lease,
                 TimestampTz now, pg::QueueSlot* slot);
inline constexpr int kClaimedColumns = 8;

// ---- The end of a claim (finish.cpp), fenced by (id, attempt).

bool Complete(pg::SpiSession& spi, const Scope& scope, int64 id, int32 attempt);
// ids and attempts: int8[] and int4[] of one length. How many it completed.
int32 CompleteMany(pg::SpiSession& spi, const Scope& scope, Datum ids, Datum attempts);

enum class FailOutcome { kRetry, kDead, kLost };
// `error` text or 0 (NULL); `retry_in_us` nullopt: the queue's backoff.
FailOutcome Fail(pg::SpiSession& spi, const Scope& scope, int64 id, int32 attempt, Datum error,
                 std::optional<int64> retry_in_us, TimestampTz now);

// When the pending job `id` is due, or 0 (gone, or not pending).
TimestampTz PendingRunAt(pg::SpiSession& spi, int64 id);

// ---- A claim's lease (lease.cpp)

// The new lease_until, or nullopt when the claim is no longer held.
std::optional<TimestampTz> Extend(pg::SpiSession& spi, const Scope& scope, int64 id, int32 attempt,
                                  TimestampTz lease_until);
bool Release(pg::SpiSession& spi, const Scope& scope, int64 id, int32 attempt);

// ---- Dead-letter (dead.cpp)

// A pending or waiting job to dead-letter with reason 'cancelled'.
bool Cancel(pg::SpiSession& spi, const Scope& scope, int64 id, TimestampTz now);
// The queue id of dead job `id`, or 0.
int32 QueueOfDeadJob(pg::SpiSession& spi, int64 id);
// Back to pending (grouped: waiting, then its group moves on) with fresh
// attempts, unless a live job holds its dedupe key. How many came back.
int32 Revive(pg::SpiSession& spi, const Queue& queue, int64 id, TimestampTz now);
int32 ReviveOldest(pg::SpiSession& spi, const Queue& queue, int32 max, TimestampTz now);

// ---- Maintenance (expire.cpp)

struct Expired {
  int64 requeued;  // made pending again
  int64 dead;      // exhausted: dead-lettered with reason 'expired'
};
// Leases that ran out before `now`, at most `batch` of each kind.
Expired ExpireLeases(pg::SpiSession& spi, TimestampTz now, int32 batch);

// ---- A queue's jobs as a whole (queue_jobs.cpp)

// Live and dead jobs of the queue.
int64 CountQueueJobs(pg::SpiSession& spi, int32 queue_id, Datum name);
// Deletes them (drop_queue with force); no group moves on, no counts.
void PurgeQueueJobs(pg::SpiSession& spi, int32 queue_id, Datum name);

// One row per queue, by name: queue_id, name, then the jobs ready,
// scheduled, running, expired and dead, the oldest ready job's age in
// seconds, paused (the columns of queue_metrics()).
pg::Result ReadQueueGauges(pg::SpiSession& spi, TimestampTz now);
enum GaugeColumn : int {
  kGaugeQueueId = 1,
  kGaugeName,
  kGaugeReady,
  kGaugeScheduled,
  kGaugeRunning,
  kGaugeExpired,
  kGaugeDead,
  kGaugeOldestReadySeconds,
  kGaugePaused,
};

}  // namespace pgq::store
