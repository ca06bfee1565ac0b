#include "core/fair_order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <string>
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

// Due rows of the table (FileRow) beside the ring's entries, as the lane
// and the claim use them: a "table" of rows by id and key; a scan files
// each key's first `per_scan` due rows (in id order) whenever the order
// holds none or a round of its keys went by; a row turn claims the row if
// it is still due (another claimer may have taken it: the turn is lost).
class RowLane {
 public:
  explicit RowLane(FairSizes sizes, int per_scan = 2)
      : memory_(FairOrder::BytesFor(sizes) / 8 + 1), per_scan_(per_scan) {
    order_ = FairOrder::Make(memory_.data(), sizes);
  }

  // An entry on the ring (filed at once: a roomy order never skips here).
  void Entry(uint64_t key, int64_t id) {
    entries_[next_place_] = id;
    keys_[next_place_] = key;
    ASSERT_EQ(order_->File(key, weight(key), next_place_++, id), FairFiled::kFiled);
  }
  void Row(uint64_t key, int64_t id) {
    table_[id] = key;
    table_ids_.insert(id);
  }
  void Weigh(uint64_t key, uint32_t weight) { weights_[key] = weight; }

  void Scan() {
    ++scans_;
    order_->BeginRows();
    std::map<uint64_t, int> per_key;
    for (const auto& [id, key] : table_) {
      if (per_key[key]++ < per_scan_) (void)order_->FileRow(key, weight(key), id);
    }
    order_->EndRows();
    since_scan_ = 0;
  }

  // One claim: a scan when due, then the next turn. Returns the key served
  // (nullopt: nothing left), and records the job's id.
  std::optional<uint64_t> Claim() {
    // (No due row: a scan that finds none lets the keys it named go, as
    // the lane's claim does when the table's index says none is due.)
    if (table_.empty() ? order_->RowsNamed()
                       : order_->RowsFiled() == 0 || order_->RowsRanDry() ||
                             since_scan_ >= order_->KeysInUse()) {
      Scan();
    }
    for (;;) {
      const std::optional<FairOrder::Taken> taken = order_->Take();
      if (!taken) return std::nullopt;
      ++since_scan_;
      if (!taken->row) {
        served_.push_back({taken->key, entries_.at(taken->place)});
        return taken->key;
      }
      const auto it = table_.find(static_cast<int64_t>(taken->place));
      if (it == table_.end()) continue;  // taken meanwhile: the turn is lost
      EXPECT_EQ(it->second, taken->key);
      served_.push_back({taken->key, it->first});
      table_.erase(it);
      return taken->key;
    }
  }
  // The key's entries filed and not served.
  int Filed(uint64_t key) const {
    int n = 0;
    for (const auto& [place, id] : entries_) n += keys_.at(place) == key;
    for (const auto& [k, id] : served_) n -= k == key && table_ids_.count(id) == 0;
    return n;
  }
  // Another claimer takes the row (the order still holds its id); false
  // if it was taken already.
  bool TakeElsewhere(int64_t id) { return table_.erase(id) > 0; }

  FairOrder& order() { return *order_; }
  const std::vector<std::pair<uint64_t, int64_t>>& served() const { return served_; }
  int scans() const { return scans_; }
  size_t rows_left() const { return table_.size(); }

 private:
  uint32_t weight(uint64_t key) const {
    const auto it = weights_.find(key);
    return it == weights_.end() ? 1 : it->second;
  }
  std::vector<uint64_t> memory_;
  FairOrder* order_;
  int per_scan_;
  FairPlace next_place_ = 0;
  std::map<FairPlace, int64_t> entries_;  // the ring's: place -> job id
  std::map<FairPlace, uint64_t> keys_;    // the ring's: place -> key
  std::set<int64_t> table_ids_;           // every row's id
  std::map<int64_t, uint64_t> table_;     // due rows: id -> key
  std::map<uint64_t, uint32_t> weights_;
  std::vector<std::pair<uint64_t, int64_t>> served_;  // (key, job id)
  int64_t since_scan_ = 0;
  int scans_ = 0;
};

std::string Keys(const RowLane& lane, size_t from, size_t count) {
  std::string out;
  for (size_t i = from; i < from + count && i < lane.served().size(); ++i) {
    out += static_cast<char>('A' + lane.served()[i].first - 1);
  }
  return out;
}

TEST(FairOrderRows, KeysWhoseJobsAreAllRowsTakeTurnsWithTheRingsKeys) {
  // Two capped tenants whose backlogs are rows (A's older), one on the
  // ring (active first): in turn, not A's rows first.
  RowLane lane(kRoomy);
  for (int64_t id = 1; id <= 30; ++id) lane.Row(1, id);
  for (int64_t id = 101; id <= 130; ++id) lane.Row(2, id);
  for (int64_t id = 201; id <= 205; ++id) lane.Entry(3, id);
  for (int i = 0; i < 21; ++i) ASSERT_TRUE(lane.Claim());
  EXPECT_EQ(Keys(lane, 0, 21), "CABCABCABCABCABABABAB");
  while (lane.Claim()) {
  }
  EXPECT_EQ(lane.served().size(), 65u);
  EXPECT_EQ(lane.rows_left(), 0u);
  // Each key's jobs in id order, each once.
  std::map<uint64_t, int64_t> last;
  std::set<int64_t> ids;
  for (const auto& [key, id] : lane.served()) {
    EXPECT_GT(id, last[key]) << "key " << key;
    last[key] = id;
    EXPECT_TRUE(ids.insert(id).second) << "job " << id << " twice";
  }
  // Nothing held once all is served.
  EXPECT_EQ(lane.order().RowsFiled(), 0);
  EXPECT_EQ(lane.order().FiledCount(), 0);
  EXPECT_EQ(lane.order().KeysInUse(), 0);
}

TEST(FairOrderRows, RowsWeighAsTheirKeys) {
  RowLane lane(kRoomy);
  lane.Weigh(1, 3);
  for (int64_t id = 1; id <= 300; ++id) lane.Row(1, id);
  for (int64_t id = 1001; id <= 1100; ++id) lane.Row(2, id);
  for (int64_t id = 2001; id <= 2064; ++id) lane.Entry(3, id);  // a key's room
  for (int i = 0; i < 300; ++i) ASSERT_TRUE(lane.Claim());
  for (size_t from = 0; from + 30 <= 300; from += 10) {
    std::map<char, int> counts;
    for (char c : Keys(lane, from, 30)) ++counts[c];
    EXPECT_NEAR(counts['A'], 18, 1) << "window at " << from;
    EXPECT_NEAR(counts['B'], 6, 1) << "window at " << from;
    EXPECT_NEAR(counts['C'], 6, 1) << "window at " << from;
  }
}

TEST(FairOrderRows, AScanGivesNoKeyATurnItDidNotEarn) {
  // A key served once keeps its F across the scans (which file its rows
  // again): it is not served again before the others have had a turn,
  // however often the table is scanned.
  RowLane lane(kRoomy, 1);
  for (int64_t id = 1; id <= 40; ++id) lane.Row(1, id);
  for (int64_t id = 101; id <= 140; ++id) lane.Row(2, id);
  for (int64_t id = 201; id <= 240; ++id) lane.Row(3, id);
  for (int i = 0; i < 60; ++i) ASSERT_TRUE(lane.Claim());
  for (size_t from = 0; from + 3 <= 60; from += 3) {
    const std::string round = Keys(lane, from, 3);
    EXPECT_EQ(std::set<char>(round.begin(), round.end()).size(), 3u) << "round at " << from;
  }
  EXPECT_GE(lane.scans(), 20);  // one row each a scan: the F must have been kept
}

TEST(FairOrderRows, AKeysRowsAndEntriesGoInIdOrder) {
  // A capped group: jobs 1 and 2 on the ring, 3 let in from the table
  // (after them), and another key's retry of its head (id 5) before its
  // entries 6 and 7.
  RowLane lane(kRoomy);
  lane.Entry(1, 1);
  lane.Entry(1, 2);
  lane.Row(1, 3);
  lane.Entry(2, 6);
  lane.Entry(2, 7);
  lane.Row(2, 5);
  std::vector<int64_t> ids[3];
  while (const std::optional<uint64_t> key = lane.Claim())
    ids[*key].push_back(lane.served().back().second);
  EXPECT_EQ(ids[1], (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(ids[2], (std::vector<int64_t>{5, 6, 7}));
}

TEST(FairOrderRows, RowsOfKeysTheScanNoLongerNamesGo) {
  RowLane lane(kRoomy);
  lane.Row(4, 1);
  lane.Row(5, 2);
  lane.Scan();
  EXPECT_EQ(lane.order().RowsFiled(), 2);
  EXPECT_EQ(lane.order().KeysInUse(), 2);
  // Key 4's row is taken by another claimer: the next scan drops it and
  // frees its slot; no turn hands it out.
  lane.TakeElsewhere(1);
  lane.Scan();
  EXPECT_EQ(lane.order().RowsFiled(), 1);
  EXPECT_EQ(lane.order().KeysInUse(), 1);
  const std::optional<FairOrder::Taken> taken = lane.order().Take();
  ASSERT_TRUE(taken);
  EXPECT_TRUE(taken->row);
  EXPECT_EQ(taken->key, 5u);
  EXPECT_EQ(taken->place, 2u);
  EXPECT_FALSE(lane.order().Take());
  // Its filed rows ran out, not its turns: the key keeps its slot (and its
  // F) until a scan finds no row of it.
  EXPECT_EQ(lane.order().KeysInUse(), 1);
  EXPECT_TRUE(lane.order().RowsNamed());
  lane.TakeElsewhere(2);
  lane.Scan();
  EXPECT_EQ(lane.order().KeysInUse(), 0);
  EXPECT_FALSE(lane.order().RowsNamed());
}

TEST(FairOrderRows, AScanAfterACutFilesNoKeyTheRotationNamedAndDropsNothing) {
  // A scan cut short at its limit read key 1's first rows (1, 2); the next
  // goes on after the cut: key 1's rows there (9000) come after rows of
  // it not yet filed again, so it is not filed (its order kept), key 2's
  // are; neither scan drops what the other filed. A scan from the first
  // row that reads every due row drops the rest.
  std::vector<uint64_t> memory(FairOrder::BytesFor(kRoomy) / 8 + 1);
  FairOrder* order = FairOrder::Make(memory.data(), kRoomy);
  order->BeginRows(true);
  EXPECT_EQ(order->FileRow(1, 1, 1), FairFiled::kFiled);
  EXPECT_EQ(order->FileRow(1, 1, 2), FairFiled::kFiled);
  order->EndRows(false);  // cut
  EXPECT_EQ(order->Take()->place, 1u);
  order->BeginRows(false);
  EXPECT_EQ(order->FileRow(1, 1, 9000), FairFiled::kSkipped);
  EXPECT_EQ(order->FileRow(2, 1, 9001), FairFiled::kFiled);
  order->EndRows(false);
  std::set<FairPlace> taken;
  for (int i = 0; i < 2; ++i) taken.insert(order->Take()->place);
  EXPECT_EQ(taken, (std::set<FairPlace>{2, 9001}));
  EXPECT_FALSE(order->Take());
  order->BeginRows(true);
  EXPECT_EQ(order->FileRow(1, 1, 3), FairFiled::kFiled);
  order->EndRows(true);
  EXPECT_EQ(order->Take()->place, 3u);
  EXPECT_FALSE(order->Take());
  order->BeginRows(true);
  order->EndRows(true);
  EXPECT_EQ(order->KeysInUse(), 0);
}

TEST(FairOrderRows, RowsTakeAQuarterOfTheCellsAndAKeysRoomAtMost) {
  // 64 cells, 8 reserved: rows take at most 14; a key at most per_key (4).
  constexpr FairSizes sizes{64, 64, 4, 8};
  std::vector<uint64_t> memory(FairOrder::BytesFor(sizes) / 8 + 1);
  FairOrder* order = FairOrder::Make(memory.data(), sizes);
  order->BeginRows();
  int filed = 0;
  for (int64_t id = 1; id <= 6; ++id) filed += order->FileRow(1, 1, id) == FairFiled::kFiled;
  EXPECT_EQ(filed, 4);
  for (uint64_t key = 2; key <= 10; ++key)
    filed += order->FileRow(key, 1, 100 + key) == FairFiled::kFiled;
  EXPECT_EQ(filed, 13);
  EXPECT_EQ(order->FileRow(11, 1, 200), FairFiled::kFiled);
  EXPECT_EQ(order->FileRow(12, 1, 201), FairFiled::kSkipped);
  order->EndRows();
  EXPECT_EQ(order->RowsFiled(), 14);
  EXPECT_EQ(order->KeysInUse(), 11);  // key 12 got no slot kept
  // The entries still have their cells.
  for (FairPlace place = 0; place < 40; ++place) {
    EXPECT_EQ(order->File(20 + place % 10, 1, place, 1000 + static_cast<int64_t>(place)),
              FairFiled::kFiled);
  }
  int taken = 0;
  while (order->Take()) ++taken;
  EXPECT_EQ(taken, 54);
  order->BeginRows();  // a scan that finds nothing
  order->EndRows();
  EXPECT_EQ(order->KeysInUse(), 0);
}

TEST(FairOrderRows, RandomTablesAndRingsServeEveryJobOnceInEachKeysOrder) {
  // Entries and rows of a few keys arrive at random, scans file the rows,
  // other claimers take rows now and then, slots are few (keys freed and
  // taken again): every job is served at most once, each key's in id
  // order among what this lane served, and nothing is held at the end.
  std::mt19937_64 random(7);
  for (int run = 0; run < 400; ++run) {
    RowLane lane(FairSizes{6, 96, 16, 8}, 1 + static_cast<int>(random() % 3));
    int64_t next_id = 1;
    std::set<int64_t> taken_elsewhere;
    std::vector<int64_t> open_rows;
    for (int step = 0; step < 200; ++step) {
      const uint64_t key = 1 + random() % 5;
      switch (random() % 6) {
        case 0:
        case 1:
          if (lane.Filed(key) < 16) lane.Entry(key, next_id++);  // within its room
          break;
        case 2:
          lane.Row(key, next_id);
          open_rows.push_back(next_id++);
          break;
        case 3:
          if (!open_rows.empty()) {
            const int64_t id = open_rows[random() % open_rows.size()];
            if (lane.TakeElsewhere(id)) taken_elsewhere.insert(id);
          }
          break;
        default:
          (void)lane.Claim();
      }
    }
    while (lane.Claim()) {
    }
    std::set<int64_t> seen;
    std::map<uint64_t, int64_t> last;
    for (const auto& [key, id] : lane.served()) {
      ASSERT_TRUE(seen.insert(id).second) << "run " << run << ": job " << id << " twice";
      ASSERT_EQ(taken_elsewhere.count(id), 0u) << "run " << run << ": job " << id;
      last[key] = id;
    }
    EXPECT_EQ(lane.rows_left(), 0u) << "run " << run;
    EXPECT_EQ(lane.order().RowsFiled(), 0) << "run " << run;
    EXPECT_EQ(lane.order().FiledCount(), 0) << "run " << run;
    EXPECT_EQ(lane.order().KeysInUse(), 0) << "run " << run;
  }
}

}  // namespace
}  // namespace pgq::core
