// The jobs store: the one owner of every statement that writes pgq.job_rows or
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
// (cancel, dead-letter, revival), groups.cpp, keys.cpp (dedupe periods and
// followers), history.cpp (the rings of completed and dead jobs), read.cpp
// (pgq.job, pgq.list_jobs), expire.cpp (maintenance),
// queue_jobs.cpp (a queue's jobs as a whole: count, purge, gauges),
// catalog.cpp (which version of pgq's tables is installed).
//
// Every function runs in the caller's SpiSession; rows are read by the
// column names of the statement beside it. Outside the jobs store, pgq.job_rows
// is only read: by the views (SQL), by the schedules' statements
// (schedules.cpp), which ask whether a schedule's last job is still live
// (its overlap rule), and by the read surfaces (read_surfaces.cpp).
#pragma once

#include <optional>
#include <vector>
#include <string_view>

#include "core/claim_hint.h"
#include "pg/index_peek.h"
#include "pg/queue_slots.h"
#include "pg/spi.h"

namespace pgq::store {

// The queue a change is for, as the caller resolved (and locked) it.
struct Queue {
  int32 id;
  std::string_view name;  // for NOTIFY
  bool notify;            // LISTEN pgq clients are told of new jobs
  // Some job of the queue was enqueued with a dedupe_for (pgq.queues.
  // dedupe_periods): an insert with a dedupe key must look at the periods.
  bool dedupe_periods;
  // Jobs of one FIFO group that may be pending or running at once (the
  // statement reads the stored value when this is above 1).
  int32 group_concurrency = 1;
  // Its plain jobs are on this ring (ADR 0028, store/ring_jobs.h); 0: none.
  int32 ring_id = 0;
  int32 max_attempts = 0;  // the queue's, for enqueue_many onto its ring
  // Some enqueue of the queue had on_duplicate => 'replace' (pgq.queues.
  // dedupe_replaces): its jobs with a dedupe key stay rows, where a replace
  // finds its holder by an index (ADR 0028, "Dedupe keys on the rings").
  bool dedupe_replaces = false;
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
  Datum dedupe_for;        // interval, or 0: the key is free once the job finished
  // Enqueue's after: the live parents (LockParents' `live`); nullptr or
  // empty: none, the job is ready as any other.
  const std::vector<int64>* parents = nullptr;
  // Its W3C trace context (text in core::StoredContext's form, ADR 0030),
  // or 0: none.
  Datum trace_context = 0;
  // With `parents`: their traceparents (text[], ADR 0030 "links"), or 0.
  Datum trace_links = 0;
  // A batch's jobs of one group (enqueue_many with group keys): the room
  // its group had left when its first job counted it, kept for the next
  // ones (nullptr: counted for this job alone). Valid within one call that
  // holds the group's lock from its first job on: nobody else changes the
  // group's count meanwhile, and the call itself only adds to it.
  struct GroupRoom* room = nullptr;
};

// What a group has left of its group_concurrency, as a batch keeps it.
struct GroupRoom {
  bool counted = false;
  int64 left = 0;
};

// One job. Its id; nullopt when `dedupe_key` is taken: by a live job of the
// queue, or by one finished within its dedupe_for (then KeyHolder says
// which, unless it changed meanwhile).
std::optional<int64> Insert(pg::SpiSession& spi, const Queue& queue, const NewJob& job);
// on_duplicate => 'replace' (keys.cpp): a holder of the key that has not
// started gets the job's payload, run_at and priority (its id); a running
// one gets the job as its follower, made pending when it finishes; with no
// live holder, Insert. nullopt: taken meanwhile, or held for a period.
std::optional<int64> Replace(pg::SpiSession& spi, const Queue& queue, const NewJob& job);
// The job of `queue_id` holding `dedupe_key` as committed now: live, or
// (unless `live_only`) finished within its dedupe_for; 0 for none.
int64 KeyHolder(pg::SpiSession& spi, int32 queue_id, Datum dedupe_key, TimestampTz now,
                bool live_only = false);

// ---- Dependencies (dependencies.cpp)

// The jobs named in an enqueue's after. The live ones (in pgq.job_rows, of the
// queues of `scope`) are locked until the caller's transaction ends, so none
// can finish before the child's rows are committed and seen. Of the others,
// the first that died (dead or cancelled), the first that waits behind a
// running duplicate (dedupe_followers), and the first not found in `scope`
// (never issued, of a queue the caller has no right on whatever its state,
// or completed without a trace when `scope` is not every queue); the rest
// are done (in history, or, for a scope of every queue, gone without a
// trace).
struct Parents {
  std::vector<int64> live;  // sorted
  // The live ones' traceparents, for those that have one (in no order,
  // perhaps repeated): the child's trace links (ADR 0030).
  std::vector<std::string> traceparents;
  int64 dead = 0;
  int64 following = 0;
  int64 unknown = 0;
};
// `ids` sorted and distinct.
Parents LockParents(pg::SpiSession& spi, const Scope& scope, const std::vector<int64>& ids);

// Maintenance: dead-letters up to `batch` dependents of parents that died
// (pgq.dependency_failures), and releases up to `batch` dependents of
// parents that completed with more than their transaction released
// (pgq.dependency_releases); the larger of the two counts.
int64 TendDependencies(pg::SpiSession& spi, TimestampTz now, int32 batch);

// One job per payload of `payloads` (jsonb[]), their max_attempts the
// queue's. Rows: column "id", in no particular order (ids are drawn in
// input order). Empty if the queue no longer exists.
// With `parents` (not empty) every job waits for them (as Insert's), with
// `trace_links` (text[], or 0: none). `trace_context`: every job's (text, or
// 0: none).
pg::Result InsertMany(pg::SpiSession& spi, const Queue& queue, Datum payloads, TimestampTz run_at,
                      int32 priority, const std::vector<int64>* parents = nullptr,
                      Datum trace_context = 0, Datum trace_links = 0);

// One job per queue of `queues` that still exists, its payload the event
// envelope {event_id, topic, payload} (pgq.publish). With `group_key` (text,
// or 0: none) the envelope names it too ("group_key") and each job joins
// that FIFO group of its queue, as enqueue's
// group_key would (the group's lock, its line, the queue's
// group_concurrency): a relay keeps one event per key in flight, in commit
// order.
// `trace_context`: the publisher's (text, or 0: none), every job's.
void InsertEvent(pg::SpiSession& spi, const Queue* queues, int count, int64 event_id, Datum topic,
                 Datum payload, TimestampTz run_at, Datum group_key = 0,
                 std::string_view group = {}, Datum trace_context = 0);

// ---- Claims (claim.cpp)

// One claim statement: up to `n` ready jobs of `queue_id`, leased until
// now + `lease`, from the claim hint of `slot` (nullptr: none) on. Rows: the
// kClaimedColumns columns of pgq.claimed_job (the queue's name from `name`;
// id ... priority), then run_at, in claim order. With `max_running` > 0, no more than
// leaves that many of the queue running, even with claims racing (none at
// all when the queue is at its cap).
pg::Result Claim(pg::SpiSession& spi, int32 queue_id, Datum name, int32 n, Datum lease,
                 TimestampTz now, pg::QueueSlot* slot, int32 max_running);
inline constexpr int kClaimedColumns = 8;
// A ring queue's claim (service/claim.cpp) merges pgq.job_rows and the ring in
// claim order. PeekReady: the key of the first due pending job of pgq.job_rows
// from the claim hint on (an index read, no statement; nullopt if none);
// `pending` false when the hint says the queue has no pending job at all
// (then no claim of pgq.job_rows is needed to keep its hint and alarm);
// `plain`: that job has no group and no progress (one a claim may take
// onto its ring: ClaimBefore's `onto`).
// ClaimBefore: Claim without a cap, of the jobs before `before` only
// (nullptr: all); those of the priorities in `onto` (the queue's rings')
// go onto their rings, already handed out (ring::TakeOnto, ADR 0028
// "Rows claimed onto the rings"), but for what must stay a row.
std::optional<core::ClaimKey> PeekReady(int32 queue_id, pg::QueueSlot* slot, TimestampTz now,
                                        bool* pending, bool* plain = nullptr);
pg::Result ClaimBefore(pg::SpiSession& spi, int32 queue_id, Datum name, int32 n, Datum lease,
                       TimestampTz now, pg::QueueSlot* slot, const core::ClaimKey* before,
                       const std::vector<int32>* onto = nullptr);
// A fair ring's turns of due rows (store/ring_jobs.h FileDueRows): the
// rows of `ids` still due, claimed (in claim order's columns, as
// ClaimBefore's); one taken or changed meanwhile is left out. With `onto`
// (the queue's rings' priorities) a plain row goes onto its ring as any
// claim moves one; without, every row is claimed in place (grouped rows
// stay rows anyway: the plain statement costs a quarter).
pg::Result ClaimRowIds(pg::SpiSession& spi, int32 queue_id, Datum name,
                       const std::vector<int64>& ids, Datum lease, TimestampTz now,
                       const std::vector<int32>* onto);
// The queue's running jobs of pgq.job_rows as a cap counts them (pg/dirty_count.h:
// claims and completions not yet committed included), up to `at_most`.
int64 CountRunning(int32 queue_id, int64 at_most);

// A claim across queues (pgq.claim(queues text[])) first asks where the
// next `n` ready jobs are, in claim order across `queues`, then claims that
// many from each (its rate limit and cap apply there). Read without locks:
// under contention a queue may have fewer left when its claim runs.
struct SpreadQueue {
  int32 id;             // 0: left out (its count is 0)
  pg::QueueSlot* slot;  // nullptr: none
  // A ring queue's next entries (store/ring_jobs.h Peek), as keys of
  // priority 0, merged with its table's.
  std::vector<pg::OrderKey> ring_keys = {};
};
std::vector<int32> SpreadClaim(const std::vector<SpreadQueue>& queues, int32 n, TimestampTz now);

// ---- The end of a claim (finish.cpp), fenced by (id, attempt).

// `result` jsonb or 0 (NULL): kept with the job when its queue keeps
// completed jobs (pgq.job_history), finished at `now`.
bool Complete(pg::SpiSession& spi, const Scope& scope, int64 id, int32 attempt, Datum result,
              TimestampTz now);
// ids and attempts: int8[] and int4[] of one length. How many it completed.
int32 CompleteMany(pg::SpiSession& spi, const Scope& scope, Datum ids, Datum attempts,
                   TimestampTz now);

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
// Back to pending at `run_at` without spending the attempt, like Release.
bool Snooze(pg::SpiSession& spi, const Scope& scope, int64 id, int32 attempt, TimestampTz run_at,
            bool due_now);
// Overwrites a running job's progress (jsonb).
bool SetProgress(pg::SpiSession& spi, const Scope& scope, int64 id, int32 attempt, Datum progress);

// ---- Dead-letter (dead.cpp)

// A job that has not finished to dead-letter with reason 'cancelled', a
// running one too (its claim is fenced by the row leaving).
bool Cancel(pg::SpiSession& spi, const Scope& scope, int64 id, TimestampTz now);
// Deletes the dead jobs of `queue` that died at or before `died_before`.
int64 PurgeDead(pg::SpiSession& spi, std::string_view queue, TimestampTz died_before);
// Deletes dead job `id` of queue `queue_id`; whether it was there.
bool PurgeDeadJob(pg::SpiSession& spi, int32 queue_id, int64 id);
// The queue id of dead job `id`, or 0 (none, or past its queue's keep_dead
// at `now`).
int32 QueueOfDeadJob(pg::SpiSession& spi, int64 id, TimestampTz now);
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

// Keys upkeep (keys.cpp): holds past their period are deleted (at most
// `batch`), followers whose holder left unseen take their key.
struct KeyUpkeep {
  int64 holds_dropped;
  int64 followers_promoted;
};
KeyUpkeep TendKeys(pg::SpiSession& spi, TimestampTz now, int32 batch);

// History rings (history.cpp): adopts, reclaims and turns the rings of
// pgq.job_history and pgq.dead_jobs, one per retention class (ADR 0026);
// how many it turned.
int TurnRings(pg::SpiSession& spi, TimestampTz now);

// ---- Reading jobs (read.cpp)

// Rows of pgq.job_info's columns (1-19; 19, dead_reason, is 3.0's), then queue_id: job `id`
// wherever it is (live, completed and kept, dead), or none. Of the queues'
// rings, only those of `rings`' queues are read (the caller's: a lookup
// costs one team its own rings, not everyone's).
pg::Result ReadJob(pg::SpiSession& spi, int64 id, TimestampTz now, const Scope& rings);
// The jobs of one queue, newest first, at most `max`, with ids below
// `before_id`, in `state` (a pgq.job_info state) if given, dead for
// `reason` (a pgq.dead_jobs reason) if given.
pg::Result ListJobs(pg::SpiSession& spi, int32 queue_id, std::string_view queue,
                    std::optional<std::string_view> state, std::optional<std::string_view> reason,
                    int32 max, std::optional<int64> before_id, TimestampTz now);
// Rows (direction, id, queue, state, queue_id): job `id`'s parents not yet
// settled ('parent'), its children waiting for it ('child') and, if
// `taken`, the dependents that died with it ('taken'); at most `max` of
// each, by id, with queue and state as ReadJob shows them.
pg::Result RelatedJobs(pg::SpiSession& spi, int64 id, int32 max, bool taken, TimestampTz now);
// ReadJob's rows of the live jobs (pgq.job_rows, pgq.dedupe_followers) of the
// queues in `scope` whose dedupe or group key is `key`, newest first, at
// most `max`.
pg::Result FindJobs(pg::SpiSession& spi, std::string_view key, const Scope& scope, int32 max,
                    TimestampTz now);
// The rows' columns are named as pgq.job_info's (id, queue, state, ... progress, result, payload,
// dead_reason), then queue_id.
inline constexpr int kJobInfoColumns = 21;

// ---- A queue's jobs as a whole (queue_jobs.cpp)

// Live and dead jobs of the queue.
int64 CountQueueJobs(pg::SpiSession& spi, int32 queue_id, Datum name);
// The queue's unfinished jobs (pending, scheduled, waiting, running; rows,
// ring jobs and dedupe followers) at `snapshot` (service/backpressure.h).
int64 CountUnfinished(pg::SpiSession& spi, int32 queue_id, Snapshot snapshot);
// pgq.job_rows' size on disk with its indexes and TOAST, and its live rows as the
// statistics count them (compaction, service/compact.h): no scan.
struct TableSize {
  int64 bytes;
  int64 live_rows;
};
TableSize JobsTableSize(pg::SpiSession& spi, Oid relid);
// Deletes them (drop_queue with force); no group moves on, no counts. Their
// dependents in other queues die (dependency_failed) as of `now`.
void PurgeQueueJobs(pg::SpiSession& spi, int32 queue_id, Datum name, TimestampTz now);

// One queue as the dashboard's overview shows it (pgq.queue_overview).
struct QueueOverview {
  std::string name;
  int64 ready;  // due, or waiting behind their FIFO group's head
  int64 scheduled;
  int64 running;
  int64 expired;
  int64 dead;
  int64 done_recent;
  int64 awaiting_parents;
  std::optional<TimestampTz> oldest_ready;  // run_at of the oldest due job
  bool paused;
  std::optional<int32> max_running;
  bool estimated;  // some count is an estimate (or the age a lower bound)
  int32 queue_id = 0;
};

// The queues of `scope`, by name, at a cost that does not grow with their
// depth: each state counted through an index and exactly up to
// `exact_up_to`; past that, estimated from the planner's statistics
// (pg/row_estimate.h) and the row marked estimated. The split of a deep
// queue's pending jobs into ready and scheduled follows the first
// `exact_up_to` in claim order; the oldest due job is looked for among the
// 64 highest priority levels.
std::vector<QueueOverview> ReadQueueOverview(pg::SpiSession& spi, const Scope& scope,
                                             int64 exact_up_to, TimestampTz now);

}  // namespace pgq::store
