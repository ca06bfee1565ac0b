// Claim wake-ups without polling or NOTIFY.
//
// A claim that waits publishes (database, queue) in its own slot of shared
// memory and sleeps on its latch. A transaction that makes jobs ready
// (enqueue, release, retry_dead, maintenance returning expired leases) notes
// their queues; when it commits, its commit callback sets the latch of every
// backend waiting on one of them.
//
// INVARIANT (no lost wake-up): a waiter publishes its slot before it takes
// the snapshot of each claim attempt, and a committer reads the slots only
// after its commit is visible to new snapshots. With a full barrier on both
// sides, either the waiter's claim sees the new jobs or the committer sees
// the waiter and sets its latch (which the waiter reset before claiming).
//
// Without shared memory (not preloaded) everything here is a no-op and
// WaitForJobs sleeps a short poll interval instead.
#pragma once

#include "core/claim_hint.h"
#include "pg/pg.h"
#include "pg/queue_slots.h"

namespace pgq::pg {

// Registers the transaction callbacks; called from _PG_init when preloaded.
void RegisterWakeups();

// Jobs of `queue_id` become ready if the current transaction commits.
void NoteJobsReady(int32 queue_id);
// Jobs of some queues of this database become ready (maintenance); their
// claim hints are reset at commit.
void NoteJobsReadyInDatabase();

// Jobs of `queue_id` become pending if the current transaction commits, the
// first of them in claim order at `key`: at commit, after the jobs are
// visible, the queue's claim hint is lowered to `key` (core/claim_hint.h)
// and, with `wake`, its waiting claims are woken.
void NoteJobsPending(int32 queue_id, const core::ClaimKey& key, bool wake);

// The current transaction completed `jobs` jobs of `queue_id`: counted in
// shared memory at commit (pg/queue_slots.h), for done_recent and as
// completions for pgq.metrics(). False without shared memory or a slot for
// the queue: the caller records them in pgq.finished itself.
bool NoteFinished(int32 queue_id, uint64 jobs);

// The current transaction did `n` of `counter` in `queue_id`: added to the
// queue's counters (pgq.metrics()) when it commits.
void NoteCount(int32 queue_id, Counter counter, uint64 n);

// The flush of completions counted in shared memory into pgq.finished, by
// the current transaction: calls write(queue_id, jobs) for each queue of
// this database that has some and that no other transaction is flushing.
// They stay in shared memory until this transaction commits (then what it
// wrote is subtracted) or aborts (then they stay for the next flush), so a
// reader finds every completion in one place or the other; and two flushers
// never write the same ones.
template <typename Write>
void FlushFinishedCounts(Write write);

// This transaction locked pending jobs of `queue_id` (a claim, a cancel, a
// completion of a job whose lease expired): claims of other sessions skip
// them and their claim hint moves past them, so if the transaction (or a
// subtransaction) rolls back, or is prepared, the queue's hint is reset.
void NoteResetOnAbort(int32 queue_id);

// For a background worker that waits across its loop (handler workers):
// publishes this backend's slot for `queue_id` and resets its latch. The
// slot stays published until the next publish, the end of a failed
// transaction, or exit; a commit that readies jobs after this call sets the
// latch.
void PublishWaiter(int32 queue_id);

// A claim that waits for jobs of one queue, for the scope of this object.
class ClaimWaiter {
 public:
  // queue_id kAnyQueue: woken by jobs made ready in any queue of the database.
  static constexpr int32 kAnyQueue = 0;
  explicit ClaimWaiter(int32 queue_id);
  ~ClaimWaiter();
  ClaimWaiter(const ClaimWaiter&) = delete;
  ClaimWaiter& operator=(const ClaimWaiter&) = delete;

  // Call before each claim attempt: later wake-ups are not lost.
  void Arm();
  // Sleeps until woken, `max_millis` passed, or an interrupt; raises on
  // cancel (query_canceled) and termination.
  void Sleep(long max_millis);

 private:
  bool shared_;  // false: not preloaded, Sleep polls
};

// At most this many queues flushed per transaction; the rest wait for the
// next pass.
inline constexpr int kMaxFlushes = 64;

// Marks the slots to flush (pg/queue_slots.h MarkFlushes) and returns them
// with what is left to write of each.
int MarkFinishedToFlush(FlushSlot* out);

template <typename Write>
void FlushFinishedCounts(Write write) {
  FlushSlot marked[kMaxFlushes];
  const int n = MarkFinishedToFlush(marked);
  for (int i = 0; i < n; ++i) {
    if (marked[i].finished > 0) write(marked[i].queue_id, marked[i].finished);
  }
}

}  // namespace pgq::pg
