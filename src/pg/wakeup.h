// Claim wake-ups without polling or NOTIFY: publish, sleep, wake.
//
// A claim that waits publishes (database, queue) in its own slot of shared
// memory and sleeps on its latch. A transaction that makes jobs ready notes
// their queues in its ledger (pg/ledger.h); when it commits, the ledger
// calls WakeWaiters, which sets the latch of every backend waiting on one of
// them.
//
// INVARIANT (no lost wake-up): a waiter publishes its slot before it takes
// the snapshot of each claim attempt, and a committer reads the slots only
// after its commit is visible to new snapshots. With a full barrier on both
// sides, either the waiter's claim sees the new jobs or the committer sees
// the waiter and sets its latch (which the waiter reset before claiming).
//
// Without shared memory (not preloaded) everything here is a no-op and
// ClaimWaiter::Sleep sleeps a short poll interval instead.
#pragma once

#include "pg/pg.h"

namespace pgq::pg {

// Readers of a stream wait under this key (stream ids and queue ids are
// counted apart; a queue id that happens to equal a key only costs a
// spurious wake-up, after which the waiter looks and sleeps again).
inline constexpr int32 kStreamWaitKeyBit = 0x40000000;
inline int32 StreamWaitKey(int32 stream_id) { return kStreamWaitKeyBit | stream_id; }

// Sets the latch of every backend of this database waiting on one of
// `queue_ids` (or on any queue), or with `whole_database` on any queue of
// it. For the ledger's commit callback: never raises.
void WakeWaiters(const int32* queue_ids, int count, bool whole_database);

// Takes this backend's waiter slot back, if published (the ledger's abort
// callback: a claim that raised while waiting). Never raises.
void UnpublishWaiter();

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
  // Woken by jobs made ready in any of `queue_ids` (and, rarely, in another
  // queue: the set is published as a 31-bit mask of ids).
  ClaimWaiter(const int32* queue_ids, int count);
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

}  // namespace pgq::pg
