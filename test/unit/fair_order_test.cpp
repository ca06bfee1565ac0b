#include "core/fair_order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <vector>

namespace pgq::core {
namespace {

// A ring's entries in the cursor's order (place = index), and a lane that
// files them, takes in fair order and sweeps as pg/job_ring.cpp is to.
struct Entry {
  uint64_t key;
  uint32_t weight = 1;
  bool in_progress = false;  // its insert has not committed yet
};

class Lane {
 public:
  explicit Lane(FairSizes sizes) : memory_(FairOrder::BytesFor(sizes) / 8 + 1) {
    order_ = FairOrder::Make(memory_.data(), sizes);
  }

  void Append(uint64_t key, uint32_t weight = 1) { ring_.push_back({key, weight}); }
  // An entry whose insert commits later (Commit): the cursor passes it
  // into the passed set; a sweep passes over it while it is there.
  void AppendInProgress(uint64_t key, uint32_t weight = 1) { ring_.push_back({key, weight, true}); }
  // The insert at `place` commits: a claim files it late (the passed set).
  void Commit(FairPlace place) { ring_[place].in_progress = false; }
  size_t InProgressCount() const {
    return static_cast<size_t>(
        std::count_if(ring_.begin(), ring_.end(), [](const Entry& e) { return e.in_progress; }));
  }
  void AppendMany(uint64_t key, int n, uint32_t weight = 1) {
    for (int i = 0; i < n; ++i) Append(key, weight);
  }

  // The cursor: files every entry up to the end of the ring (stops at one
  // whose key finds no slot).
  void Advance() {
    while (cursor_ < ring_.size()) {
      const Entry& e = ring_[cursor_];
      if (e.in_progress) {
        passed_.insert(cursor_);
        ++cursor_;
        continue;
      }
      // A cancelled entry: passed over; its note kept while its key skips
      // (a sweep reads it again).
      if (noted_.count(cursor_) > 0) {
        if (!order_->Skipping(e.key)) noted_.erase(cursor_);
      } else if (order_->File(e.key, e.weight, cursor_) == FairFiled::kNoSlot) {
        return;
      }
      ++cursor_;
    }
  }

  // A cancel of the entry at `place`, as the lane's tombstone makes it: an
  // offer is taken out; an entry a sweep or the cursor has still to read is
  // noted, and passed over when read; one handed out is not cancelled.
  // Whether it was.
  bool Cancel(FairPlace place) {
    if (ring_[place].in_progress) return false;  // not committed: nobody sees it
    if (place >= cursor_ || passed_.count(place) > 0) {
      cancelled_.insert(place);
      return noted_.insert(place).second;
    }
    switch (order_->Remove(ring_[place].key, place)) {
      case FairFiled::kFiled:
        cancelled_.insert(place);
        return true;
      case FairFiled::kSkipped:
        cancelled_.insert(place);
        return noted_.insert(place).second;
      default:
        return false;
    }
  }

  // A sweep from the least mark up to the cursor.
  void Sweep() {
    std::optional<FairPlace> place = order_->BeginSweep();
    if (!place) return;
    ++sweeps_;
    FairPlace reached = *place;
    while (place && *place < cursor_) {
      ++swept_reads_;
      if (ring_[*place].in_progress || passed_.count(*place) > 0) {
        // Not the sweep's: the passed set files it once committed.
      } else if (noted_.count(*place) == 0) {
        (void)order_->Sweep(ring_[*place].key, ring_[*place].weight, *place);
      } else if (order_->Pass(ring_[*place].key, *place)) {
        noted_.erase(*place);  // its key's mark went past it: never read again
      }
      reached = *place + 1;
      place = order_->SweepNext(*place);
    }
    const bool at_cursor = place.has_value();  // stopped by the cursor, not by SweepNext
    order_->EndSweep(at_cursor ? cursor_ : reached, at_cursor);
  }

  // One claim, as fair_order.h says a lane makes it.
  // Committed entries of the passed set, filed late (kept while no slot);
  // a cancelled one goes, its note kept while a sweep has still to pass it.
  void FilePassed() {
    for (auto it = passed_.begin(); it != passed_.end();) {
      const FairPlace place = *it;
      const Entry& e = ring_[place];
      if (e.in_progress) {
        ++it;
        continue;
      }
      if (noted_.count(place) > 0) {
        if (order_->Remove(e.key, place) != FairFiled::kSkipped) noted_.erase(place);
      } else {
        const FairFiled filed = order_->FileLate(e.key, e.weight, place);
        if (filed == FairFiled::kNoSlot) {
          ++it;
          continue;
        }
        if (filed == FairFiled::kFiled) late_.insert(place);
      }
      it = passed_.erase(it);
    }
  }

  std::optional<FairOrder::Taken> Claim(bool (*eligible)(void*, uint64_t) = nullptr,
                                        void* context = nullptr) {
    FilePassed();
    Advance();
    if (order_->SweepWanted()) {
      Sweep();
      FilePassed();  // a sweep that ends a key's skipping may free the slot one waits for
      Advance();
    }
    const std::optional<FairOrder::Taken> next = order_->Next();
    const std::optional<FairPlace> least = order_->Least();
    std::optional<FairOrder::Taken> taken = order_->Take(eligible, context);
    if (eligible == nullptr && !limited_) {
      EXPECT_EQ(next.has_value(), taken.has_value());
      if (next && taken) {
        EXPECT_EQ(next->place, taken->place);
      }
    }
    if (!taken && order_->SkippingKeys() > 0) {
      Sweep();
      FilePassed();
      Advance();
      taken = order_->Take(eligible, context);
    }
    if (least && taken) {
      EXPECT_LE(*least, taken->place);
    }
    if (taken) {
      EXPECT_LT(taken->place, ring_.size());
      EXPECT_EQ(ring_[taken->place].key, taken->key);
      served_.push_back(taken->place);
    }
    return taken;
  }

  // Claims until nothing is left; every entry exactly once, and each key's
  // entries in ring order.
  void Drain() {
    while (Claim()) {
    }
    Advance();
    EXPECT_EQ(cursor_, ring_.size());
    CheckServed();
  }

  void CheckServed() const {
    std::vector<int> times(ring_.size(), 0);
    std::map<uint64_t, FairPlace> last;
    for (const FairPlace place : served_) {
      ++times[place];
      if (late_.count(place) > 0) continue;  // a late commit comes when it comes
      const uint64_t key = ring_[place].key;
      if (last.count(key)) {
        EXPECT_LT(last[key], place) << "key " << key << " out of its order";
      }
      last[key] = place;
    }
    for (size_t i = 0; i < times.size(); ++i) {
      if (times[i] > 1) ADD_FAILURE() << "entry " << i << " served twice";
      if (times[i] > 0 && cancelled_.count(i) > 0) ADD_FAILURE() << "entry " << i << " cancelled";
    }
    EXPECT_EQ(static_cast<size_t>(std::count(times.begin(), times.end(), 1)), served_.size());
  }

  FairOrder& order() { return *order_; }
  const std::vector<FairPlace>& served() const { return served_; }
  uint64_t KeyOf(FairPlace place) const { return ring_[place].key; }
  size_t size() const { return ring_.size(); }
  void Limit(int64_t now, double rate) {
    limited_ = true;
    order_->SetClock(now, rate);
  }
  size_t CancelledCount() const { return cancelled_.size(); }
  int sweeps() const { return sweeps_; }
  int64_t swept_reads() const { return swept_reads_; }

 private:
  std::vector<uint64_t> memory_;
  FairOrder* order_;
  std::vector<Entry> ring_;
  FairPlace cursor_ = 0;
  std::vector<FairPlace> served_;
  std::set<FairPlace> noted_;      // cancelled, for the cursor or a sweep to pass over
  std::set<FairPlace> passed_;     // passed by the cursor in progress
  std::set<FairPlace> late_;       // filed late: after its key's later entries
  bool limited_ = false;           // a rate limit: Take may pass over Next's key
  std::set<FairPlace> cancelled_;  // taken out or noted: never to be served
  int sweeps_ = 0;
  int64_t swept_reads_ = 0;
};

constexpr FairSizes kRoomy{64, 4096, 64, 16};

// Counts of each key in the served window [from, from + width).
std::map<uint64_t, int> Window(const Lane& lane, size_t from, size_t width) {
  std::map<uint64_t, int> counts;
  for (size_t i = from; i < from + width; ++i) ++counts[lane.KeyOf(lane.served()[i])];
  return counts;
}

TEST(FairOrder, ThreeKeysOfEqualWeightShareEveryWindowOfThirty) {
  // The case: 100,000 / 1,000 / 10 ready (scaled: 3,000 / 300 /
  // 10), the noisy import appended first.
  Lane lane(kRoomy);
  lane.AppendMany(1, 3000);
  lane.AppendMany(2, 300);
  lane.AppendMany(3, 10);
  lane.Drain();
  // While all three have work (the first 30 claims), and for the two
  // while they have: exactly in turn.
  for (size_t from = 0; from + 30 <= 30; ++from) {
    const std::map<uint64_t, int> w = Window(lane, from, 30);
    for (uint64_t key : {1, 2, 3}) EXPECT_NEAR(w.at(key), 10, 1) << "key " << key;
  }
  for (size_t from = 30; from + 30 <= 600; ++from) {
    const std::map<uint64_t, int> w = Window(lane, from, 30);
    EXPECT_NEAR(w.at(1), 15, 1);
    EXPECT_NEAR(w.at(2), 15, 1);
  }
}

TEST(FairOrder, WeightsThreeOneOneGiveEighteenSixSix) {
  Lane lane(kRoomy);
  lane.AppendMany(1, 600, 3);
  lane.AppendMany(2, 200, 1);
  lane.AppendMany(3, 200, 1);
  lane.Drain();
  for (size_t from = 0; from + 30 <= 900; from += 7) {
    const std::map<uint64_t, int> w = Window(lane, from, 30);
    EXPECT_NEAR(w.at(1), 18, 1) << "window at " << from;
    EXPECT_NEAR(w.at(2), 6, 1) << "window at " << from;
    EXPECT_NEAR(w.at(3), 6, 1) << "window at " << from;
  }
}

TEST(FairOrder, AJobOfAnIdleKeyIsServedWithinOneRound) {
  Lane lane(kRoomy);
  lane.AppendMany(1, 500);
  lane.AppendMany(2, 500);
  for (int i = 0; i < 101; ++i) ASSERT_TRUE(lane.Claim());
  // Key 3 was idle; its job is appended behind 898 others.
  lane.Append(3);
  const size_t before = lane.served().size();
  std::map<uint64_t, int> ahead;
  for (;;) {
    const std::optional<FairOrder::Taken> taken = lane.Claim();
    ASSERT_TRUE(taken);
    if (taken->key == 3) break;
    ++ahead[taken->key];
  }
  // At most one claim of each active key before it.
  EXPECT_LE(lane.served().size() - before - 1, 2u);
  for (const auto& [key, n] : ahead) EXPECT_LE(n, 1) << "key " << key;
  lane.Drain();
}

TEST(FairOrder, AKeyPassedOverKeepsItsTurn) {
  Lane lane(kRoomy);
  lane.AppendMany(1, 10);
  lane.AppendMany(2, 10);
  bool key1_allowed = false;
  auto allow = [](void* context, uint64_t key) { return key != 1 || *static_cast<bool*>(context); };
  // Key 1 is at its cap: key 2 is served meanwhile.
  for (int i = 0; i < 3; ++i) {
    const std::optional<FairOrder::Taken> taken = lane.Claim(allow, &key1_allowed);
    ASSERT_TRUE(taken);
    EXPECT_EQ(taken->key, 2u);
  }
  // Room again: key 1 is owed its turns (its F did not move), so it comes first.
  key1_allowed = true;
  const std::optional<FairOrder::Taken> next = lane.Claim(allow, &key1_allowed);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->key, 1u);
  // Nothing eligible: none, and nothing is lost.
  key1_allowed = false;
  auto none = [](void*, uint64_t) { return false; };
  EXPECT_FALSE(lane.order().Take(none, nullptr));
  lane.Drain();
}

TEST(FairOrder, SkippingKeepsEachKeysOrderAndServesEveryEntryOnce) {
  // Four offers a key, 24 cells: the noisy key skips, sweeps refill it.
  Lane lane(FairSizes{16, 24, 4, 4});
  lane.AppendMany(1, 400);
  lane.AppendMany(2, 40);
  lane.AppendMany(3, 5);
  lane.AppendMany(1, 100);
  lane.Append(4);
  lane.Drain();
  EXPECT_GT(lane.sweeps(), 0);
  EXPECT_EQ(lane.served().size(), lane.size());
  // A sweep stops once the noisy key is full: about two reads a claim.
  EXPECT_LT(static_cast<double>(lane.swept_reads()) / static_cast<double>(lane.size()), 2.5);
  // The late key 4 still came early: the cursor reached it at once.
  const auto at = std::find_if(lane.served().begin(), lane.served().end(),
                               [&](FairPlace p) { return lane.KeyOf(p) == 4; });
  EXPECT_LT(at - lane.served().begin(), 8);
}

TEST(FairOrder, MoreKeysThanSlotsWaitForASlotAndLoseNothing) {
  Lane lane(FairSizes{4, 64, 8, 4});
  for (uint64_t key = 1; key <= 20; ++key) lane.AppendMany(key, 3);
  lane.Drain();
  EXPECT_EQ(lane.served().size(), 60u);
  EXPECT_EQ(lane.order().KeysInUse(), 0);
}

TEST(FairOrder, ALateEntryIsFiledPastItsKeysRoomOrLeftToTheSweep) {
  std::vector<uint64_t> memory(FairOrder::BytesFor({8, 8, 2, 2}) / 8 + 1);
  FairOrder& order = *FairOrder::Make(memory.data(), {8, 8, 2, 2});
  EXPECT_EQ(order.File(7, 1, 10), FairFiled::kFiled);
  EXPECT_EQ(order.File(7, 1, 11), FairFiled::kFiled);
  EXPECT_EQ(order.File(7, 1, 12), FairFiled::kSkipped);  // its room is 2
  // Behind the mark (passed by the cursor while in progress): filed anyway.
  EXPECT_EQ(order.FileLate(7, 1, 5), FairFiled::kFiled);
  // At or past the mark: the sweep's.
  EXPECT_EQ(order.FileLate(7, 1, 12), FairFiled::kSkipped);
  // Another key, no limit reached: filed.
  EXPECT_EQ(order.FileLate(8, 1, 6), FairFiled::kFiled);
  EXPECT_EQ(order.FiledCount(), 4);
  // Key 7 holds 3 offers (10, 11 and the late 5): after two of them are
  // taken (between key 8's) it is down to half its room, and the sweep
  // files it from its mark up to its room of 2.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(order.Take());
  ASSERT_EQ(order.BeginSweep(), std::optional<FairPlace>(12));
  EXPECT_EQ(order.Sweep(7, 1, 11), FairFiled::kIgnored);  // before its mark
  EXPECT_EQ(order.Sweep(7, 1, 12), FairFiled::kFiled);
  EXPECT_EQ(order.SweepNext(12), std::optional<FairPlace>(13));
  EXPECT_EQ(order.Sweep(9, 1, 13), FairFiled::kIgnored);  // no sweep key
  EXPECT_EQ(order.Sweep(7, 1, 14), FairFiled::kSkipped);  // full again: its mark is 14
  EXPECT_EQ(order.SweepNext(14), std::nullopt);
  order.EndSweep(15, false);
  EXPECT_EQ(order.SkippingKeys(), 1);
}

TEST(FairOrder, ManyKeysCostFewSweptReadsPerClaim) {
  // 2,000 keys with a deep backlog each, 8 offers a key, 4,096 cells.
  Lane lane(FairSizes{4096, 4096, 8, 64});
  for (int round = 0; round < 20; ++round) {
    for (uint64_t key = 1; key <= 2000; ++key) lane.Append(key);
  }
  lane.Drain();
  EXPECT_EQ(lane.served().size(), 40000u);
  // A window of 2,000 claims serves every key, none more than twice (a
  // key waiting for a sweep falls behind by a turn and catches up).
  for (size_t from = 0; from + 2000 <= 38000; from += 1000) {
    const std::map<uint64_t, int> w = Window(lane, from, 2000);
    EXPECT_EQ(w.size(), 2000u) << "window at " << from;
    for (const auto& [key, n] : w) EXPECT_LE(n, 2) << "key " << key << " window at " << from;
  }
  // The sweeps read the skipped region again, amortized over what they file.
  EXPECT_LT(static_cast<double>(lane.swept_reads()) / 40000, 4.0);
}

TEST(FairOrder, RandomRingsServeEveryEntryOnceInEachKeysOrder) {
  std::mt19937_64 random(42);
  for (int trial = 0; trial < 4000; ++trial) {
    const bool cancels = trial % 3 == 1 || trial % 5 == 0;
    const bool late = trial % 3 == 2 || trial % 5 == 0;
    const int32_t keys = 2 + static_cast<int32_t>(random() % 12);
    const int32_t per_key = 1 + static_cast<int32_t>(random() % 6);
    const int32_t reserve = static_cast<int32_t>(random() % 3);
    const int32_t offers = reserve + 1 + static_cast<int32_t>(random() % 40);
    Lane lane(FairSizes{keys, offers, per_key, reserve});
    const int distinct = 1 + static_cast<int>(random() % 20);
    for (int step = 0; step < 600; ++step) {
      if (random() % 3 != 0) {
        const uint64_t key = 1 + random() % static_cast<uint64_t>(distinct);
        const uint32_t weight = 1 + static_cast<uint32_t>(random() % 5);
        if (late && random() % 4 == 0) {
          lane.AppendInProgress(key, weight);
        } else {
          lane.Append(key, weight);
        }
      } else if (late && random() % 3 == 0 && lane.size() > 0) {
        lane.Commit(random() % lane.size());
      } else if (cancels && random() % 4 == 0 && lane.size() > 0) {
        (void)lane.Cancel(random() % lane.size());
      } else {
        (void)lane.Claim();
      }
    }
    for (FairPlace place = 0; place < lane.size(); ++place) lane.Commit(place);
    lane.Drain();
    EXPECT_EQ(lane.served().size() + lane.CancelledCount(), lane.size()) << "trial " << trial;
  }
}

TEST(FairOrder, ACancelTakesAnOfferOutOrIsNotedForTheSweep) {
  Lane lane(FairSizes{8, 64, 2, 0});
  lane.AppendMany(1, 6);  // 0-5: key 1 files 0 and 1, skips from 2
  lane.Append(2);         // 6
  lane.Advance();
  EXPECT_TRUE(lane.Cancel(1));  // an offer: out of key 1's FIFO
  EXPECT_TRUE(lane.Cancel(3));  // past key 1's mark: noted
  EXPECT_EQ(lane.order().FiledCount(), 2);
  ASSERT_TRUE(lane.order().Least().has_value());
  EXPECT_EQ(*lane.order().Least(), 0u);
  lane.Drain();
  std::vector<FairPlace> served = lane.served();
  std::sort(served.begin(), served.end());
  EXPECT_EQ(served, (std::vector<FairPlace>{0, 2, 4, 5, 6}));
  EXPECT_FALSE(lane.Cancel(0));  // handed out: no cancel
  EXPECT_FALSE(lane.order().Least().has_value());
}

TEST(FairOrder, RebaseMovesEveryPlaceHeld) {
  Lane lane(FairSizes{8, 64, 2, 0});
  lane.AppendMany(1, 4);
  lane.Advance();  // offers 0, 1; key 1 skipping at 2
  lane.order().Rebase(0);
  EXPECT_EQ(*lane.order().Least(), 0u);
  std::vector<uint64_t> memory(FairOrder::BytesFor(FairSizes{8, 64, 2, 0}) / 8 + 1);
  FairOrder* order = FairOrder::Make(memory.data(), FairSizes{8, 64, 2, 0});
  for (FairPlace place = 100; place < 104; ++place) (void)order->File(7, 1, place);
  order->Rebase(100);
  EXPECT_EQ(*order->Least(), 0u);
  EXPECT_EQ(order->Take()->place, 0u);
  EXPECT_EQ(order->Take()->place, 1u);
  ASSERT_TRUE(order->BeginSweep().has_value());
  EXPECT_EQ(order->Sweep(7, 1, 2), FairFiled::kFiled);  // its mark moved with the rest
}

TEST(FairOrder, ARateLimitPerKeyHoldsInEveryWindowAndAcrossEmptyingKeys) {
  // 2 starts a second per key; key 1 has a backlog, key 2 gets one job at a
  // time (it empties after each start: its bucket must outlive its offers).
  Lane lane(FairSizes{8, 256, 64, 4});
  lane.AppendMany(1, 500);
  std::vector<std::pair<int64_t, uint64_t>> starts;       // (time, key)
  for (int64_t now = 0; now <= 20000000; now += 50000) {  // 20 s in 50 ms steps
    lane.Append(2);
    lane.Limit(now, 2.0);
    while (const std::optional<FairOrder::Taken> taken = lane.Claim()) {
      starts.emplace_back(now, taken->key);
    }
  }
  for (uint64_t key : {uint64_t{1}, uint64_t{2}}) {
    int64_t total = 0;
    for (int64_t from = 0; from <= 10000000; from += 50000) {
      int in_window = 0;
      for (const auto& [at, k] : starts)
        in_window += k == key && at >= from && at < from + 10000000;
      EXPECT_LE(in_window, 21) << "key " << key << " window from " << from;
      EXPECT_GE(in_window, 19) << "key " << key << " window from " << from;
    }
    for (const auto& [at, k] : starts) total += k == key;
    EXPECT_GE(total, 40);
  }
}

}  // namespace
}  // namespace pgq::core
