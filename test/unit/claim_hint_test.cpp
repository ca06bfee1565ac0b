// The claim hint's rules (core/claim_hint.h), including a randomized model
// check: a simulated queue whose jobs become pending, are claimed and come due
// in random interleavings, where every claim scans from the hint and must
// find exactly what a full scan finds.
#include "core/claim_hint.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

namespace pgq::core {
namespace {

ClaimKey Key(int32_t priority, int64_t run_at, int64_t id) {
  return ClaimKey{priority, run_at, id};
}

TEST(ClaimOrder, HigherPriorityThenEarlierRunAtThenLowerId) {
  EXPECT_TRUE(ClaimsBefore(Key(5, 100, 9), Key(0, 1, 1)));
  EXPECT_TRUE(ClaimsBefore(Key(0, 1, 9), Key(0, 2, 1)));
  EXPECT_TRUE(ClaimsBefore(Key(0, 1, 1), Key(0, 1, 2)));
  EXPECT_FALSE(ClaimsBefore(Key(0, 1, 1), Key(0, 1, 1)));
  EXPECT_TRUE(ClaimsBefore(kFirstKey, Key(std::numeric_limits<int32_t>::max(), 0, 0)));
}

TEST(ClaimHint, StartsWithAFullScan) {
  const ClaimHint hint;
  const ScanPlan plan = PlanScan(hint, 0);
  EXPECT_FALSE(plan.skip_scan);
  EXPECT_FALSE(ClaimsBefore(kFirstKey, plan.from) || ClaimsBefore(plan.from, kFirstKey));
}

TEST(ClaimHint, PublishedOnlyWhenUnchangedSinceRead) {
  ClaimHint hint;
  ASSERT_TRUE(PublishScan(hint, PlanScan(hint, 0), ScanResult{true, Key(0, 7, 7), {}}));
  const ScanPlan plan = PlanScan(hint, 0);
  LowerHint(hint, Key(0, 5, 5));  // a commit between the read and the publication
  EXPECT_FALSE(PublishScan(hint, plan, ScanResult{true, Key(0, 9, 9), {}}));
  EXPECT_EQ(hint.start.id, 5);
  const ScanPlan again = PlanScan(hint, 0);
  EXPECT_TRUE(PublishScan(hint, again, ScanResult{true, Key(0, 9, 9), {}}));
  EXPECT_EQ(hint.start.id, 9);
}

TEST(ClaimHint, NothingPendingSkipsTheScanUntilAJobComes) {
  ClaimHint hint;
  ASSERT_TRUE(PublishScan(hint, PlanScan(hint, 0), ScanResult{false, kFirstKey, {}}));
  EXPECT_TRUE(PlanScan(hint, 0).skip_scan);
  LowerHint(hint, Key(0, 7, 7));
  const ScanPlan plan = PlanScan(hint, 0);
  EXPECT_FALSE(plan.skip_scan);
  EXPECT_EQ(plan.from.id, 7);
}

TEST(ClaimHint, LoweringNeverRaises) {
  ClaimHint hint;
  ASSERT_TRUE(PublishScan(hint, PlanScan(hint, 0), ScanResult{true, Key(0, 50, 50), {}}));
  LowerHint(hint, Key(0, 90, 90));
  EXPECT_EQ(hint.start.id, 50);
  LowerHint(hint, Key(9, 90, 90));  // higher priority comes first
  EXPECT_EQ(hint.start.id, 90);
}

TEST(ClaimHint, ADueAlarmRestartsTheScanAtItsKey) {
  ClaimHint hint;
  const ClaimAlarm passed{true, 1000, Key(9, 1000, 3)};
  ASSERT_TRUE(PublishScan(hint, PlanScan(hint, 0), ScanResult{true, Key(0, 10, 40), passed}));
  EXPECT_EQ(PlanScan(hint, 999).from.id, 40);
  const ScanPlan due = PlanScan(hint, 1000);
  EXPECT_TRUE(due.alarm_consumed);
  EXPECT_EQ(due.from.id, 3);
  // The scan from the alarm saw its job again and replaces the alarm.
  ASSERT_TRUE(PublishScan(hint, due, ScanResult{true, Key(0, 10, 41), {}}));
  EXPECT_FALSE(hint.alarm.set);
}

TEST(ClaimHint, AnAlarmNotYetDueIsKept) {
  ClaimHint hint;
  ASSERT_TRUE(
      PublishScan(hint, PlanScan(hint, 0),
                  ScanResult{true, Key(0, 10, 40), ClaimAlarm{true, 5000, Key(9, 5000, 3)}}));
  ASSERT_TRUE(
      PublishScan(hint, PlanScan(hint, 100),
                  ScanResult{true, Key(0, 10, 45), ClaimAlarm{true, 3000, Key(7, 3000, 44)}}));
  EXPECT_EQ(hint.alarm.due, 3000);
  EXPECT_EQ(hint.alarm.key.id, 3);
}

TEST(ClaimHint, ADueAlarmWakesAQueueWithNothingPending) {
  ClaimHint hint;
  ASSERT_TRUE(PublishScan(hint, PlanScan(hint, 0),
                          ScanResult{false, kFirstKey, ClaimAlarm{true, 500, Key(0, 500, 8)}}));
  EXPECT_TRUE(PlanScan(hint, 499).skip_scan);
  const ScanPlan due = PlanScan(hint, 500);
  EXPECT_FALSE(due.skip_scan);
  EXPECT_EQ(due.from.id, 8);
}

TEST(ClaimHint, ResetScansEverything) {
  ClaimHint hint;
  ASSERT_TRUE(PublishScan(hint, PlanScan(hint, 0), ScanResult{false, kFirstKey, {}}));
  ResetHint(hint);
  const ScanPlan plan = PlanScan(hint, 0);
  EXPECT_FALSE(plan.skip_scan);
  EXPECT_EQ(plan.from.id, kFirstKey.id);
}

// The model: jobs with keys; a job is pending from its commit until claimed.
// Transactions make jobs pending (committed later, lowering the hint at
// commit); claims take a snapshot, scan from the hint and publish. The check:
// a claim from the hint returns the same first ready job as a full scan of
// the committed state at the same moment.
struct Job {
  ClaimKey key;
  bool pending = false;       // in the committed state
  bool noted_future = false;  // not due when its transaction noted it (as pgq does)
};

struct Model {
  std::map<int64_t, Job> jobs;  // by id
  ClaimHint hint;
  int64_t now = 0;

  // First pending ready job of the committed state at or after `from`.
  const Job* FirstReady(const ClaimKey& from) const {
    const Job* best = nullptr;
    for (const auto& [id, job] : jobs) {
      if (!job.pending || job.key.run_at > now || ClaimsBefore(job.key, from)) continue;
      if (best == nullptr || ClaimsBefore(job.key, best->key)) best = &job;
    }
    return best;
  }

  ScanResult Scan(const ScanPlan& plan) const {
    const ClaimKey& from = plan.from;
    ScanResult result{false, kFirstKey, {}};
    if (const Job* first = FirstReady(from)) {
      result.found_ready = true;
      result.first_ready = first->key;
    }
    if (!plan.must_report_passed) return result;
    for (const auto& [id, job] : jobs) {
      if (!job.pending || job.key.run_at <= now || ClaimsBefore(job.key, from)) continue;
      result.passed = MergeAlarms(result.passed, ClaimAlarm{true, job.key.run_at, job.key});
    }
    return result;
  }
};

TEST(ClaimHint, RandomInterleavingsNeverHideAReadyJob) {
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    std::mt19937 rng(seed);
    Model m;
    int64_t next_id = 1;
    // Transactions in flight: the jobs they will make pending at commit.
    std::vector<std::vector<int64_t>> open;
    // A claim in flight: its plan and the snapshot result it computed.
    struct Flight {
      ScanPlan plan;
      ScanResult result;
    };
    std::vector<Flight> claims;
    for (int step = 0; step < 400; ++step) {
      switch (rng() % 7) {
        case 0: {  // a transaction makes a new job (or a claimed one) pending
          ClaimKey key{static_cast<int32_t>(rng() % 3),
                       m.now - 5 + static_cast<int64_t>(rng() % 12), next_id};
          m.jobs[next_id] = Job{key, false, key.run_at > m.now};
          if (open.empty() || rng() % 2 == 0) open.emplace_back();
          open[rng() % open.size()].push_back(next_id++);
          break;
        }
        case 1:  // a transaction commits: visible first, then the hint lowers
          if (!open.empty()) {
            const std::size_t i = rng() % open.size();
            for (const int64_t id : open[i]) m.jobs[id].pending = true;
            for (const int64_t id : open[i]) {
              const ClaimKey& key = m.jobs[id].key;
              if (m.jobs[id].noted_future) {
                AddAlarm(m.hint, ClaimAlarm{true, key.run_at, key});
              } else {
                LowerHint(m.hint, key);
              }
            }
            open.erase(open.begin() + static_cast<std::ptrdiff_t>(i));
          }
          break;
        case 2: {  // a claim reads the hint and takes its snapshot
          const ScanPlan plan = PlanScan(m.hint, m.now);
          if (plan.skip_scan) {
            EXPECT_EQ(m.FirstReady(kFirstKey), nullptr) << "seed " << seed << " step " << step;
          } else {
            claims.push_back(Flight{plan, m.Scan(plan)});
            const Job* full = m.FirstReady(kFirstKey);
            const ScanResult& r = claims.back().result;
            ASSERT_EQ(full != nullptr, r.found_ready) << "seed " << seed << " step " << step;
            if (full != nullptr) {
              EXPECT_EQ(full->key.id, r.first_ready.id) << "seed " << seed;
            }
          }
          break;
        }
        case 3:  // a claim publishes what it saw (possibly late)
          if (!claims.empty()) {
            const std::size_t i = rng() % claims.size();
            (void)PublishScan(m.hint, claims[i].plan, claims[i].result);
            claims.erase(claims.begin() + static_cast<std::ptrdiff_t>(i));
          }
          break;
        case 4: {  // a job is claimed and committed as running
          if (const Job* first = m.FirstReady(kFirstKey)) m.jobs[first->key.id].pending = false;
          break;
        }
        case 5:
          m.now += static_cast<int64_t>(rng() % 4);
          break;
        default:  // a claimed job becomes pending again later (release, expiry)
          for (auto& [id, job] : m.jobs) {
            if (!job.pending && rng() % 8 == 0) {
              job.noted_future = job.key.run_at > m.now;
              if (open.empty()) open.emplace_back();
              open[0].push_back(id);
              break;
            }
          }
          break;
      }
    }
  }
}

}  // namespace
}  // namespace pgq::core
