#include "core/pending_count.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace pgq::core {
namespace {

// A predicate for EndCount: the snapshot saw exactly the xids in `seen`.
struct SawOnly {
  std::set<uint32_t> xids;
  bool operator()(uint32_t xid) const { return xids.count(xid) > 0; }
};

// A count made known at `committed` the way a backend makes it: a count
// with no commit in its window.
void MakeKnown(PendingCount& count, int64_t committed) {
  ASSERT_TRUE(BeginCount(count, 1));
  const CountResult result = EndCount(count, 1, committed, SawOnly{});
  ASSERT_TRUE(result.counted);
  ASSERT_EQ(count.state, PendingCount::kKnown);
  ASSERT_EQ(count.committed, committed);
}

// Whether a window is open: a second counter is refused exactly then. (Opens
// one when none was, so only for tests that are done with the count.)
bool WindowOpen(PendingCount& count) { return !BeginCount(count, 999); }

TEST(PendingCount, NothingIsReservedBeforeACount) {
  PendingCount count{};
  EXPECT_EQ(Reserve(count, 1, 100), Room::kUnknown);
  EXPECT_EQ(count.reserved, 0);
  // Counting is not known either: a producer waits for the count's end.
  ASSERT_TRUE(BeginCount(count, 7));
  EXPECT_EQ(count.state, PendingCount::kCounting);
  EXPECT_EQ(Reserve(count, 1, 100), Room::kUnknown);
  EXPECT_EQ(count.reserved, 0);
}

// committed + reserved + jobs may reach the limit, never pass it; a refusal
// reserves nothing (not even the part that would have fitted).
TEST(PendingCount, ReservesUpToTheLimitAndNoFurther) {
  PendingCount count{};
  MakeKnown(count, 5);
  EXPECT_EQ(Reserve(count, 3, 10), Room::kReserved);
  EXPECT_EQ(count.reserved, 3);
  EXPECT_EQ(Reserve(count, 3, 10), Room::kFull);  // 5 + 3 + 3 = 11
  EXPECT_EQ(count.reserved, 3);
  EXPECT_EQ(Reserve(count, 2, 10), Room::kReserved);  // 5 + 3 + 2 = 10: exactly the limit
  EXPECT_EQ(count.reserved, 5);
  EXPECT_EQ(Reserve(count, 1, 10), Room::kFull);
  EXPECT_EQ(count.reserved, 5);
  EXPECT_EQ(count.committed, 5);                      // a reservation is not a commit
  EXPECT_EQ(Reserve(count, 1, 11), Room::kReserved);  // a raised limit: room again
}

TEST(PendingCount, AQueueAtItsLimitRefusesEvenOneJob) {
  PendingCount count{};
  MakeKnown(count, 4);
  EXPECT_EQ(Reserve(count, 1, 4), Room::kFull);
  EXPECT_EQ(Reserve(count, 1, 3), Room::kFull);  // a lowered limit: above it already
  EXPECT_EQ(count.reserved, 0);
  PendingCount empty{};
  MakeKnown(empty, 0);
  EXPECT_EQ(Reserve(empty, 2, 1), Room::kFull);  // one batch larger than the limit
  EXPECT_EQ(Reserve(empty, 1, 1), Room::kReserved);
}

// An abort gives its room back, and a reservation forgotten meanwhile does
// not make it negative.
TEST(PendingCount, GiveBackReturnsRoomButNeverBelowZero) {
  PendingCount count{};
  MakeKnown(count, 8);
  ASSERT_EQ(Reserve(count, 2, 10), Room::kReserved);
  ASSERT_EQ(Reserve(count, 1, 10), Room::kFull);
  GiveBack(count, 2);
  EXPECT_EQ(count.reserved, 0);
  EXPECT_EQ(count.committed, 8);
  EXPECT_EQ(Reserve(count, 2, 10), Room::kReserved);  // the room is there again
  GiveBack(count, 5);
  EXPECT_EQ(count.reserved, 0);
  GiveBack(count, 1);
  EXPECT_EQ(count.reserved, 0);
}

// Known: a commit's delta is applied, its reservation turned into it.
TEST(PendingCount, ACommitIsAppliedToAKnownCount) {
  PendingCount count{};
  MakeKnown(count, 10);
  ASSERT_EQ(Reserve(count, 3, 100), Room::kReserved);
  EXPECT_TRUE(Committed(count, 3, 3, 501));  // reservation given back
  EXPECT_EQ(count.committed, 13);
  EXPECT_EQ(count.reserved, 0);
  EXPECT_TRUE(Committed(count, -1, 0, 502));  // went down
  EXPECT_EQ(count.committed, 12);
  EXPECT_EQ(count.state, PendingCount::kKnown);
}

// A producer whose jobs were all deduplicated commits no delta: only its
// reservation goes back.
TEST(PendingCount, ACommitOfNoJobsGivesItsReservationBack) {
  PendingCount count{};
  MakeKnown(count, 10);
  ASSERT_EQ(Reserve(count, 4, 100), Room::kReserved);
  EXPECT_TRUE(Committed(count, 0, 4, 503));
  EXPECT_EQ(count.committed, 10);
  EXPECT_EQ(count.reserved, 0);
  // Fewer jobs than reserved: the rest of the room goes back too.
  ASSERT_EQ(Reserve(count, 4, 100), Room::kReserved);
  EXPECT_TRUE(Committed(count, 1, 4, 504));
  EXPECT_EQ(count.committed, 11);
  EXPECT_EQ(count.reserved, 0);
}

// True only when waiters for room may find some: the count went down or a
// reservation went back. A commit that only adds jobs does not wake them.
TEST(PendingCount, ACommitThatFreesNothingWakesNobody) {
  PendingCount count{};
  MakeKnown(count, 10);
  EXPECT_FALSE(Committed(count, 2, 0, 505));
  EXPECT_EQ(count.committed, 12);
  EXPECT_FALSE(Committed(count, 0, 0, 506));
  EXPECT_EQ(count.committed, 12);
}

// Unknown: nothing is applied (a count begun later sees the commit in its
// snapshot, so applying it too would count it twice).
TEST(PendingCount, ACommitIsDroppedWhileUnknown) {
  PendingCount count{};
  EXPECT_FALSE(Committed(count, 5, 0, 601));
  EXPECT_FALSE(Committed(count, -1, 0, 602));
  EXPECT_EQ(count.committed, 0);
  EXPECT_EQ(count.state, PendingCount::kUnknown);
  ASSERT_TRUE(BeginCount(count, 3));
  // The snapshot counted 7, both commits included; they were not logged.
  const CountResult result = EndCount(count, 3, 7, [](uint32_t) { return false; });
  EXPECT_TRUE(result.counted);
  EXPECT_FALSE(result.was_known);
  EXPECT_EQ(count.committed, 7);
}

// The window: commits that end while a count runs are logged; at its end
// those its snapshot did not see are added to what it counted.
TEST(PendingCount, ACountAddsTheCommitsItsSnapshotMissed) {
  PendingCount count{};
  ASSERT_TRUE(BeginCount(count, 42));
  EXPECT_EQ(count.state, PendingCount::kCounting);
  EXPECT_FALSE(Committed(count, 3, 0, 10));   // seen by the snapshot
  EXPECT_FALSE(Committed(count, -1, 0, 11));  // not seen
  EXPECT_FALSE(Committed(count, 2, 0, 12));   // not seen
  EXPECT_FALSE(Committed(count, -2, 0, 13));  // seen
  EXPECT_EQ(count.committed, 0);              // nothing applied while counting
  EXPECT_EQ(Reserve(count, 1, 100), Room::kUnknown);
  const CountResult result = EndCount(count, 42, 20, SawOnly{{10, 13}});
  EXPECT_TRUE(result.counted);
  EXPECT_FALSE(result.was_known);
  EXPECT_EQ(result.found, 21);  // 20 - 1 + 2
  EXPECT_EQ(count.committed, 21);
  EXPECT_EQ(count.state, PendingCount::kKnown);
  EXPECT_EQ(Reserve(count, 1, 22), Room::kReserved);
  // The log was emptied: a commit now is applied once, and the next
  // count's end does not add the old window again.
  EXPECT_TRUE(Committed(count, 1, 1, 14));
  EXPECT_EQ(count.committed, 22);
  ASSERT_TRUE(BeginCount(count, 42));
  const CountResult again = EndCount(count, 42, 22, [](uint32_t) { return false; });
  EXPECT_TRUE(again.counted);
  EXPECT_EQ(count.committed, 22);
}

// A recheck of a known count: it stays known (and reservable) throughout,
// and its end reports what was kept against what was found.
TEST(PendingCount, ARecheckReportsWhatWasKeptAgainstWhatWasFound) {
  PendingCount count{};
  MakeKnown(count, 10);
  ASSERT_TRUE(BeginCount(count, 5));
  EXPECT_EQ(count.state, PendingCount::kKnown);
  EXPECT_EQ(Reserve(count, 2, 100), Room::kReserved);
  EXPECT_TRUE(Committed(count, 2, 2, 1));   // seen
  EXPECT_TRUE(Committed(count, -1, 0, 2));  // not seen
  EXPECT_EQ(count.committed, 11);           // still applied
  // The snapshot found 9 (drift: one job fewer than kept at that instant).
  const CountResult result = EndCount(count, 5, 9, SawOnly{{1}});
  EXPECT_TRUE(result.counted);
  EXPECT_TRUE(result.was_known);
  EXPECT_EQ(result.kept, 11);
  EXPECT_EQ(result.found, 8);
  EXPECT_EQ(count.committed, 8);
  EXPECT_EQ(count.reserved, 0);
  EXPECT_EQ(count.state, PendingCount::kKnown);
  // No drift: kept and found agree.
  ASSERT_TRUE(BeginCount(count, 5));
  EXPECT_FALSE(Committed(count, 1, 0, 3));  // not seen
  const CountResult same = EndCount(count, 5, 8, SawOnly{});
  EXPECT_TRUE(same.was_known);
  EXPECT_EQ(same.kept, 9);
  EXPECT_EQ(same.found, 9);
}

TEST(PendingCount, OneCountAtATime) {
  PendingCount count{};
  ASSERT_TRUE(BeginCount(count, 1));
  EXPECT_FALSE(BeginCount(count, 2));
  EXPECT_FALSE(BeginCount(count, 1));  // not even the same backend twice
  EXPECT_EQ(count.counter_pid, 1);
  EXPECT_EQ(count.state, PendingCount::kCounting);
  ASSERT_TRUE(EndCount(count, 1, 0, SawOnly{}).counted);
  EXPECT_TRUE(BeginCount(count, 2));  // a recheck, once the first ended
  EXPECT_FALSE(BeginCount(count, 1));
}

// A backend whose count was forgotten and taken over by another must not
// end or abandon the other's.
TEST(PendingCount, OnlyTheCounterEndsOrAbandonsItsCount) {
  PendingCount count{};
  ASSERT_TRUE(BeginCount(count, 1));
  EXPECT_FALSE(Committed(count, 4, 0, 77));  // not seen by anyone's snapshot
  AbandonCount(count, 2);
  EXPECT_EQ(count.state, PendingCount::kCounting);
  EXPECT_EQ(count.counter_pid, 1);
  const CountResult other = EndCount(count, 2, 100, SawOnly{});
  EXPECT_FALSE(other.counted);
  EXPECT_EQ(count.state, PendingCount::kCounting);
  EXPECT_EQ(count.committed, 0);
  EXPECT_FALSE(BeginCount(count, 3));  // the window is still open
  // The counter's own end still has the logged commit.
  const CountResult mine = EndCount(count, 1, 5, SawOnly{});
  EXPECT_TRUE(mine.counted);
  EXPECT_EQ(count.committed, 9);
  // Ended: a second end (or an abandon) by the same backend does nothing.
  EXPECT_FALSE(EndCount(count, 1, 50, SawOnly{}).counted);
  AbandonCount(count, 1);
  EXPECT_EQ(count.committed, 9);
  EXPECT_EQ(count.state, PendingCount::kKnown);
}

// A count that raised: unknown again if it was the first, still known (with
// every commit applied meanwhile) if it was a recheck; the window closed.
TEST(PendingCount, AnAbandonedCountLeavesTheStateAsBefore) {
  PendingCount count{};
  ASSERT_TRUE(BeginCount(count, 1));
  EXPECT_FALSE(Committed(count, 2, 0, 1));
  AbandonCount(count, 1);
  EXPECT_EQ(count.state, PendingCount::kUnknown);
  EXPECT_EQ(Reserve(count, 1, 100), Room::kUnknown);
  EXPECT_FALSE(EndCount(count, 1, 7, SawOnly{}).counted);  // too late
  EXPECT_EQ(count.state, PendingCount::kUnknown);
  // The abandoned window's log is gone: the next count does not add it.
  ASSERT_TRUE(BeginCount(count, 2));
  ASSERT_TRUE(EndCount(count, 2, 7, [](uint32_t) { return false; }).counted);
  EXPECT_EQ(count.committed, 7);

  ASSERT_TRUE(BeginCount(count, 3));
  EXPECT_TRUE(Committed(count, -1, 0, 2));
  AbandonCount(count, 3);
  EXPECT_EQ(count.state, PendingCount::kKnown);
  EXPECT_EQ(count.committed, 6);
  EXPECT_EQ(Reserve(count, 1, 100), Room::kReserved);
  EXPECT_FALSE(WindowOpen(count));
}

// The log holds kWindow commits: a count through exactly that many is exact.
TEST(PendingCount, AWindowHoldsKWindowCommits) {
  PendingCount count{};
  ASSERT_TRUE(BeginCount(count, 1));
  for (uint32_t xid = 1; xid <= PendingCount::kWindow; ++xid) {
    (void)Committed(count, 1, 0, xid);
  }
  const CountResult result = EndCount(count, 1, 0, [](uint32_t) { return false; });
  EXPECT_TRUE(result.counted);
  EXPECT_EQ(count.committed, PendingCount::kWindow);
  EXPECT_EQ(count.state, PendingCount::kKnown);
}

// One commit more than the log holds: the count is lost (it cannot know
// whether its snapshot saw the missing one). The first count goes back to
// unknown; a recheck keeps the count it had, every commit applied.
TEST(PendingCount, AWindowThatOverflowsLosesTheCount) {
  PendingCount count{};
  ASSERT_TRUE(BeginCount(count, 1));
  for (uint32_t xid = 1; xid <= PendingCount::kWindow + 1; ++xid) {
    (void)Committed(count, 1, 0, xid);
  }
  const CountResult lost = EndCount(count, 1, 0, [](uint32_t) { return false; });
  EXPECT_FALSE(lost.counted);
  EXPECT_FALSE(lost.was_known);
  EXPECT_EQ(count.state, PendingCount::kUnknown);
  EXPECT_EQ(Reserve(count, 1, 1000), Room::kUnknown);
  EXPECT_FALSE(WindowOpen(count));  // closed: a new count may begin (and just did)

  PendingCount known{};
  MakeKnown(known, 5);
  ASSERT_TRUE(BeginCount(known, 2));
  for (uint32_t xid = 1; xid <= PendingCount::kWindow + 1; ++xid) {
    (void)Committed(known, 1, 0, xid);
  }
  const CountResult recheck = EndCount(known, 2, 999, [](uint32_t) { return false; });
  EXPECT_FALSE(recheck.counted);
  EXPECT_TRUE(recheck.was_known);
  EXPECT_EQ(known.state, PendingCount::kKnown);
  EXPECT_EQ(known.committed, 5 + PendingCount::kWindow + 1);  // not the lost 999
  // The next window starts empty and whole again.
  ASSERT_TRUE(BeginCount(known, 2));
  for (uint32_t xid = 1; xid <= PendingCount::kWindow; ++xid) {
    (void)Committed(known, -1, 0, xid);
  }
  const CountResult next = EndCount(known, 2, 6, [](uint32_t) { return false; });
  EXPECT_TRUE(next.counted);
  EXPECT_EQ(next.kept, 6);
  EXPECT_EQ(next.found, 6 - PendingCount::kWindow);
}

// A new installation: unknown until counted again, and a count in progress
// is forgotten (its end does nothing).
TEST(PendingCount, AForgottenCountIsUnknownAndItsWindowClosed) {
  PendingCount count{};
  MakeKnown(count, 10);
  ASSERT_EQ(Reserve(count, 3, 100), Room::kReserved);
  ASSERT_TRUE(BeginCount(count, 4));
  ForgetCount(count);
  EXPECT_EQ(count.state, PendingCount::kUnknown);
  EXPECT_EQ(count.committed, 0);
  EXPECT_EQ(Reserve(count, 1, 100), Room::kUnknown);
  EXPECT_FALSE(HasRoom(count, 100));
  const CountResult stale = EndCount(count, 4, 10, SawOnly{});
  EXPECT_FALSE(stale.counted);
  EXPECT_EQ(count.state, PendingCount::kUnknown);
  GiveBack(count, 100);
  EXPECT_EQ(count.reserved, 0);
  ASSERT_TRUE(BeginCount(count, 5));
  ASSERT_TRUE(EndCount(count, 5, 12, SawOnly{}).counted);
  EXPECT_EQ(count.committed, 12);
  ForgetCount(count);  // with no window open
  EXPECT_EQ(count.state, PendingCount::kUnknown);
  EXPECT_FALSE(WindowOpen(count));
}

// The room a producer holds outlives a ForgetCount: it still commits (or
// gives back) its jobs, so a count made after must leave it out of what
// others may reserve, or the queue would pass its limit.
TEST(PendingCount, AForgottenCountKeepsTheRoomProducersHold) {
  PendingCount count{};
  MakeKnown(count, 8);
  ASSERT_EQ(Reserve(count, 2, 10), Room::kReserved);  // a producer in progress
  ForgetCount(count);
  ASSERT_TRUE(BeginCount(count, 1));
  ASSERT_TRUE(EndCount(count, 1, 8, SawOnly{}).counted);  // its jobs not committed yet
  EXPECT_EQ(Reserve(count, 1, 10), Room::kFull);          // 8 + 2 held + 1 > 10
  EXPECT_TRUE(Committed(count, 2, 2, 900));
  EXPECT_EQ(count.committed, 10);
  EXPECT_EQ(count.reserved, 0);
}

TEST(PendingCount, LowWaterIsNineTenthsRoundedUp) {
  EXPECT_EQ(LowWater(1), 1);
  EXPECT_EQ(LowWater(7), 7);
  EXPECT_EQ(LowWater(10), 9);
  EXPECT_EQ(LowWater(11), 10);
  EXPECT_EQ(LowWater(1000), 900);
  EXPECT_EQ(LowWater(1001), 901);
  for (int64_t limit = 1; limit <= 100000; ++limit) {
    const int64_t low = LowWater(limit);
    ASSERT_GE(10 * low, 9 * limit) << limit;
    ASSERT_LT(10 * (low - 1), 9 * limit) << limit;
  }
}

// A waiter goes on only below the low-water mark, not merely below the
// limit (so one freed job does not wake every waiter for it), and never on
// an unknown count.
TEST(PendingCount, HasRoomOnlyWhenKnownAndBelowTheLowWater) {
  PendingCount count{};
  EXPECT_FALSE(HasRoom(count, 10));
  ASSERT_TRUE(BeginCount(count, 1));
  EXPECT_FALSE(HasRoom(count, 10));  // counting
  ASSERT_TRUE(EndCount(count, 1, 8, SawOnly{}).counted);
  EXPECT_TRUE(HasRoom(count, 10));  // 8 < 9
  ASSERT_EQ(Reserve(count, 1, 10), Room::kReserved);
  EXPECT_FALSE(HasRoom(count, 10));  // 8 + 1 = 9: below the limit, not the low water
  GiveBack(count, 1);
  EXPECT_TRUE(HasRoom(count, 10));
  EXPECT_FALSE(Committed(count, 1, 0, 2));
  EXPECT_FALSE(HasRoom(count, 10));  // committed 9
  EXPECT_TRUE(HasRoom(count, 11));   // low water 10
  PendingCount one{};
  MakeKnown(one, 0);
  EXPECT_TRUE(HasRoom(one, 1));
  ASSERT_EQ(Reserve(one, 1, 1), Room::kReserved);
  EXPECT_FALSE(HasRoom(one, 1));
}

// A queue under concurrent producers, completions and a counter, each step
// one event in one order. The model keeps the truth: the committed
// unfinished jobs, the room producers hold, and each commit's place in the
// commit order; a snapshot at instant s sees exactly the commits before s.
class QueueModel {
 public:
  explicit QueueModel(uint32_t seed) : rng_(seed) {
    limit_ = 1 + Below(40);
    truth_ = Below(limit_ + 1);
    claimable_ = truth_;
    if (Chance(50)) MakeKnown(count_, truth_);  // else the first count is yet to come
  }

  // Random events; then every transaction ends and the counter runs until
  // the count is known, and the count must be the truth.
  void Run() {
    const int steps = 10 + static_cast<int>(Below(70));  // < kWindow commits a window
    for (int step = 0; step < steps && !::testing::Test::HasFatalFailure(); ++step) {
      const int64_t event = Below(100);
      if (event < 30) {
        StartProducer();
      } else if (event < 50) {
        StartCompletion();
      } else if (event < 80) {
        EndOne();
      } else if (event < 95) {
        CounterStep();
      } else if (event < 97) {
        // The count raised: the state as before it, the window closed.
        if (phase_ != kIdle) {
          AbandonCount(count_, kCounter);
          EXPECT_FALSE(count_.window) << Where();
          EXPECT_EQ(count_.state, first_ ? PendingCount::kUnknown : PendingCount::kKnown)
              << Where();
          phase_ = kIdle;
        }
      } else if (event < 98) {
        Forget();
      } else {
        // Another backend tries to count meanwhile.
        if (phase_ != kIdle) {
          EXPECT_FALSE(BeginCount(count_, 999)) << Where();
        }
      }
      Check();
    }
    while (!::testing::Test::HasFatalFailure() &&
           (!open_.empty() || phase_ != kIdle || count_.state != PendingCount::kKnown)) {
      if (!open_.empty() && Chance(60)) {
        EndOne();
      } else {
        CounterStep();
      }
      Check();
    }
    EXPECT_EQ(count_.state, PendingCount::kKnown) << Where();
    EXPECT_EQ(count_.committed, truth_) << Where();
    EXPECT_EQ(count_.reserved, 0) << Where();
  }

  int64_t unseen_added() const { return unseen_added_; }
  int64_t seen_skipped() const { return seen_skipped_; }
  int64_t first_counts() const { return first_counts_; }

 private:
  static constexpr int32_t kCounter = 4242;
  struct Txn {
    uint32_t xid;
    int64_t delta;     // jobs added (>= 0, a producer) or -1 (a completion)
    int64_t reserved;  // room it holds
  };
  enum Phase { kIdle, kBegun, kSnapshotTaken };

  int64_t Below(int64_t n) { return std::uniform_int_distribution<int64_t>(0, n - 1)(rng_); }
  bool Chance(int percent) { return Below(100) < percent; }
  std::string Where() const {
    return "limit " + std::to_string(limit_) + " truth " + std::to_string(truth_) + " commits " +
           std::to_string(commits_);
  }

  uint32_t NewXid() {
    for (;;) {
      const uint32_t xid = static_cast<uint32_t>(rng_());
      if (xid != 0 && xids_.insert(xid).second) return xid;
    }
  }

  // A producer reserves first; only reserved jobs are inserted. Some of
  // them may be deduplicated away (fewer committed than reserved).
  void StartProducer() {
    const int64_t jobs = 1 + Below(4);
    const bool known = count_.state == PendingCount::kKnown;
    const bool fits = truth_ + outstanding_ + jobs <= limit_;
    const Room room = Reserve(count_, jobs, limit_);
    EXPECT_EQ(room, !known ? Room::kUnknown : fits ? Room::kReserved : Room::kFull) << Where();
    if (room != Room::kReserved) return;
    const int64_t delta = Chance(20) ? Below(jobs + 1) : jobs;
    open_.push_back(Txn{NewXid(), delta, jobs});
    outstanding_ += jobs;
  }

  // A completion (or a dead-lettering) of a job no other completes.
  void StartCompletion() {
    if (claimable_ == 0) return;
    --claimable_;
    open_.push_back(Txn{NewXid(), -1, 0});
  }

  // A random open transaction commits (three in four) or aborts.
  void EndOne() {
    if (open_.empty()) return;
    const size_t at = static_cast<size_t>(Below(static_cast<int64_t>(open_.size())));
    const Txn txn = open_[at];
    open_[at] = open_.back();
    open_.pop_back();
    outstanding_ -= txn.reserved;
    if (Chance(75)) {
      const bool known = count_.state == PendingCount::kKnown;
      truth_ += txn.delta;
      if (txn.delta > 0) claimable_ += txn.delta;
      committed_at_[txn.xid] = commits_++;
      const bool woke = Committed(count_, txn.delta, txn.reserved, txn.xid);
      if (known && (txn.delta < 0 || txn.reserved > 0)) {
        EXPECT_TRUE(woke) << Where();
      }
      if (!known && txn.delta != 0 && txn.reserved == 0) {
        EXPECT_FALSE(woke) << Where();
      }
    } else {
      if (txn.delta < 0) ++claimable_;
      GiveBack(count_, txn.reserved);
    }
  }

  // The counter: begins, takes its snapshot at a later instant, ends later.
  void CounterStep() {
    switch (phase_) {
      case kIdle:
        first_ = count_.state == PendingCount::kUnknown;
        ASSERT_TRUE(BeginCount(count_, kCounter)) << Where();
        EXPECT_EQ(count_.state, first_ ? PendingCount::kCounting : PendingCount::kKnown) << Where();
        phase_ = kBegun;
        return;
      case kBegun:
        snapshot_at_ = commits_;
        counted_ = truth_;
        phase_ = kSnapshotTaken;
        return;
      case kSnapshotTaken: {
        const CountResult result = EndCount(count_, kCounter, counted_, [this](uint32_t xid) {
          const auto it = committed_at_.find(xid);
          EXPECT_TRUE(it != committed_at_.end())
              << "seen() asked about xid " << xid << ", never committed";
          const bool seen = it != committed_at_.end() && it->second < snapshot_at_;
          (seen ? seen_skipped_ : unseen_added_) += 1;
          return seen;
        });
        phase_ = kIdle;
        EXPECT_TRUE(result.counted) << Where();
        EXPECT_EQ(result.was_known, !first_) << Where();
        EXPECT_EQ(result.found, truth_) << Where();
        if (result.was_known) {
          EXPECT_EQ(result.kept, result.found) << Where();  // no drift here
        }
        EXPECT_EQ(count_.state, PendingCount::kKnown) << Where();
        if (first_) ++first_counts_;
        return;
      }
    }
  }

  // A new installation: unknown until counted again; a count in progress
  // ends with nothing. Reservations held stay held (their producers still
  // give them back or commit them).
  void Forget() {
    ForgetCount(count_);
    EXPECT_EQ(count_.state, PendingCount::kUnknown) << Where();
    if (phase_ != kIdle) {
      EXPECT_FALSE(EndCount(count_, kCounter, truth_, SawOnly{}).counted) << Where();
      phase_ = kIdle;
    }
  }

  // At every instant: the room held is what producers hold; a known count
  // is exact and within the limit.
  void Check() {
    EXPECT_EQ(count_.reserved, outstanding_) << Where();
    if (count_.state == PendingCount::kKnown) {
      EXPECT_EQ(count_.committed, truth_) << Where();
      EXPECT_LE(count_.committed + count_.reserved, limit_) << Where();
    }
  }

  std::mt19937 rng_;
  PendingCount count_{};
  int64_t limit_ = 0;
  int64_t truth_ = 0;        // committed unfinished jobs
  int64_t claimable_ = 0;    // of those, not being completed
  int64_t outstanding_ = 0;  // room held by open producers
  std::vector<Txn> open_;
  std::set<uint32_t> xids_;
  std::unordered_map<uint32_t, int64_t> committed_at_;  // xid -> its place in the commit order
  int64_t commits_ = 0;
  Phase phase_ = kIdle;
  bool first_ = false;  // the count in progress began on an unknown count
  int64_t snapshot_at_ = 0;
  int64_t counted_ = 0;
  int64_t unseen_added_ = 0;
  int64_t seen_skipped_ = 0;
  int64_t first_counts_ = 0;
};

TEST(PendingCount, RandomQueuesAreCountedExactlyAndNeverPassTheLimit) {
  int64_t unseen = 0;
  int64_t seen = 0;
  int64_t first_counts = 0;
  for (uint32_t trial = 0; trial < 4000; ++trial) {
    QueueModel model(1000 + trial);
    model.Run();
    if (HasFailure()) {
      ADD_FAILURE() << "trial " << trial;
      return;
    }
    unseen += model.unseen_added();
    seen += model.seen_skipped();
    first_counts += model.first_counts();
  }
  // The trials did exercise the window both ways, and first counts.
  EXPECT_GT(unseen, 1000);
  EXPECT_GT(seen, 1000);
  EXPECT_GT(first_counts, 1000);
}

}  // namespace
}  // namespace pgq::core
