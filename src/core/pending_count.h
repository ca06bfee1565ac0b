// A queue's unfinished jobs, kept for its max_pending (ADR 0029,
// "Backpressure, as built"). Pure C++; one per queue slot in shared memory
// (pg/queue_slots.h), every operation under the slot's spinlock.
//
// What is counted: the queue's jobs not yet finished, whatever their state
// (scheduled, waiting, ready, running), as the queue's rows, ring entries
// and dedupe followers at one snapshot show them (store/queue_jobs.cpp,
// CountUnfinished). Claims, retries and moves between a ring and a row do
// not change it; a new job adds one, a completion or a dead-lettering takes
// one away, each at its transaction's commit.
//
// Producers *reserve* their jobs before they insert them: a queue never
// holds more than `limit` by producers' doing, since committed + reserved
// never passes it. A commit turns its reservation into its delta; an abort
// gives the reservation back.
//
// After a start the count is unknown. One backend counts it at a snapshot
// while every commit that ends meanwhile is logged with its transaction
// id (the window); at the end each logged delta the snapshot did not see is
// added to what it counted, so the count is exact at the instant it ends,
// with no lock held against producers, claims or completions. The same
// window rechecks a known count (drift: what was kept less what was found).
#pragma once

#include <cstdint>

namespace pgq::core {

struct PendingCount {
  enum State : uint8_t { kUnknown = 0, kCounting, kKnown };
  static constexpr int kWindow = 128;

  State state = kUnknown;
  bool window = false;       // a count is in progress: commits are logged
  bool window_lost = false;  // more commits ended in it than the log holds
  int32_t counter_pid = 0;   // the backend counting
  int64_t committed = 0;     // kKnown: unfinished jobs as committed
  int64_t reserved = 0;      // room held by producers in progress
  int window_used = 0;
  uint32_t window_xids[kWindow];
  int64_t window_deltas[kWindow];
};

enum class Room {
  kReserved,  // the jobs fit: reserved
  kFull,      // they do not
  kUnknown,   // not counted since the start: count first
};

// Reserves `jobs` of room under `limit` (> 0).
Room Reserve(PendingCount& count, int64_t jobs, int64_t limit);

// An abort (or a subtransaction's) gives its reservation back.
void GiveBack(PendingCount& count, int64_t jobs);

// A transaction `xid` committed: `delta` jobs more (or fewer) unfinished,
// its `reserved` room given back. Applied when known, logged in a window,
// dropped when unknown (a count begun later sees the commit). True when
// the count went down (waiters for room look again).
bool Committed(PendingCount& count, int64_t delta, int64_t reserved, uint32_t xid);

// Begins a count (the state unknown) or a check (known) by backend `pid`;
// false while another is in progress.
bool BeginCount(PendingCount& count, int32_t pid);

struct CountResult {
  bool counted = false;  // false: the window lost commits; try again later
  bool was_known = false;
  int64_t kept = 0;   // was_known: what was kept, brought to the same instant
  int64_t found = 0;  // the count now
};

// Ends the count backend `pid` began: `counted` jobs at a snapshot;
// `seen(xid)` whether the snapshot saw transaction `xid`'s commit.
template <typename Seen>
CountResult EndCount(PendingCount& count, int32_t pid, int64_t counted, Seen seen) {
  CountResult result;
  if (!count.window || count.counter_pid != pid) return result;  // forgotten meanwhile
  result.was_known = count.state == PendingCount::kKnown;
  count.window = false;
  count.counter_pid = 0;
  if (count.window_lost) {
    count.window_lost = false;
    count.window_used = 0;
    if (count.state == PendingCount::kCounting) count.state = PendingCount::kUnknown;
    return result;
  }
  int64_t unseen = 0;
  for (int i = 0; i < count.window_used; ++i) {
    if (!seen(count.window_xids[i])) unseen += count.window_deltas[i];
  }
  count.window_used = 0;
  result.counted = true;
  result.kept = count.committed;
  result.found = counted + unseen;
  count.committed = result.found;
  count.state = PendingCount::kKnown;
  return result;
}

// A count that raised: the state as before it (if still `pid`'s).
void AbandonCount(PendingCount& count, int32_t pid);

// Forgets the count (a new installation of the extension; a transaction
// whose notes did not fit): unknown until counted again.
void ForgetCount(PendingCount& count);

// The low-water mark of `limit`: nine tenths, rounded up.
int64_t LowWater(int64_t limit);

// Whether a waiter for room may go on: known and below the low-water mark.
bool HasRoom(const PendingCount& count, int64_t limit);

}  // namespace pgq::core
