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
// while producers, claims and completions go on: it opens a *window*, takes
// its snapshot, publishes it, counts, and closes the window. A commit that
// ends while the window is open and the snapshot published asks the
// snapshot whether it saw that commit, and adds its delta to `unseen` if
// not; one that ends before the publication (the snapshot taken or not) is
// logged, and the publication decides it. At the close the count is what
// the snapshot found plus `unseen`: exact at that instant, with no lock
// held against anyone and no bound on the commits of a long count. The
// same window rechecks a known count (drift: what was kept less what was
// found).
#pragma once

#include <cstdint>

namespace pgq::core {

struct PendingCount {
  enum State : uint8_t { kUnknown = 0, kCounting, kKnown };
  // Commits that end between a window's opening and its snapshot's
  // publication (a GetSnapshotData and a copy).
  static constexpr int kEarly = 64;

  State state = kUnknown;
  bool window = false;       // a count is in progress
  bool seeing = false;       // its snapshot is published: commits ask it
  bool window_lost = false;  // more early commits than the log holds
  int32_t counter_pid = 0;   // the backend counting
  int32_t snapshot = -1;     // the published snapshot (the caller's index)
  int64_t committed = 0;     // kKnown: unfinished jobs as committed
  int64_t reserved = 0;      // room held by producers in progress
  int64_t unseen = 0;        // deltas of the window's commits the snapshot missed
  int early_used = 0;
  uint32_t early_xids[kEarly];
  int64_t early_deltas[kEarly];
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
// its `reserved` room given back. In a window, `seen(xid)` (asked only
// once the snapshot is published) says whether the count's snapshot saw
// the commit; applied to a known count. True when the count went down or
// room was given back (waiters for room look again).
template <typename Seen>
bool Committed(PendingCount& count, int64_t delta, int64_t reserved, uint32_t xid, Seen seen) {
  GiveBack(count, reserved);
  const bool freed = reserved > 0;
  if (delta == 0) return freed;
  if (count.window) {
    if (count.seeing) {
      if (!seen(xid)) count.unseen += delta;
    } else if (count.early_used == PendingCount::kEarly) {
      count.window_lost = true;
    } else {
      count.early_xids[count.early_used] = xid;
      count.early_deltas[count.early_used] = delta;
      ++count.early_used;
    }
  }
  if (count.state != PendingCount::kKnown) return freed;
  count.committed += delta;
  return delta < 0 || freed;
}

// Begins a count (the state unknown) or a check (known) by backend `pid`;
// false while another is in progress.
bool BeginCount(PendingCount& count, int32_t pid);

// A count that raised, or lost its window: the state as before it (if
// still `pid`'s).
void AbandonCount(PendingCount& count, int32_t pid);

// The count's snapshot (`snapshot`, the caller's handle) is taken and
// published: the commits logged since the window opened are decided by
// `seen`, later ones ask it. False (the count abandoned: begin again) when
// the window lost commits, or is not `pid`'s any more.
template <typename Seen>
bool SnapshotTaken(PendingCount& count, int32_t pid, int32_t snapshot, Seen seen) {
  if (!count.window || count.counter_pid != pid) return false;
  if (count.window_lost) {
    AbandonCount(count, pid);
    return false;
  }
  for (int i = 0; i < count.early_used; ++i) {
    if (!seen(count.early_xids[i])) count.unseen += count.early_deltas[i];
  }
  count.early_used = 0;
  count.seeing = true;
  count.snapshot = snapshot;
  return true;
}

struct CountResult {
  bool counted = false;  // false: the window was not this backend's any more
  bool was_known = false;
  int64_t kept = 0;   // was_known: what was kept, brought to the same instant
  int64_t found = 0;  // the count now
};

// Ends the count backend `pid` began: `counted` jobs at its snapshot.
CountResult EndCount(PendingCount& count, int32_t pid, int64_t counted);

// Forgets the count (a new installation of the extension; a transaction
// whose notes did not fit): unknown until counted again.
void ForgetCount(PendingCount& count);

// The low-water mark of `limit`: nine tenths, rounded up.
int64_t LowWater(int64_t limit);

// Whether a waiter for room may go on: known and below the low-water mark.
bool HasRoom(const PendingCount& count, int64_t limit);

}  // namespace pgq::core
