#include "core/backoff.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

namespace pgq::core {
namespace {

constexpr int64_t kSecond = 1000000;

TEST(BackoffCeiling, DoublesFromBaseUntilTheCap) {
  const BackoffPolicy policy{1 * kSecond, 60 * kSecond};
  EXPECT_EQ(BackoffCeiling(policy, 1), 1 * kSecond);
  EXPECT_EQ(BackoffCeiling(policy, 2), 2 * kSecond);
  EXPECT_EQ(BackoffCeiling(policy, 3), 4 * kSecond);
  EXPECT_EQ(BackoffCeiling(policy, 6), 32 * kSecond);
  EXPECT_EQ(BackoffCeiling(policy, 7), 60 * kSecond);
  EXPECT_EQ(BackoffCeiling(policy, 50), 60 * kSecond);
}

TEST(BackoffCeiling, NeverOverflowsForHugeAttempts) {
  const BackoffPolicy policy{kSecond, std::numeric_limits<int64_t>::max()};
  EXPECT_EQ(BackoffCeiling(policy, std::numeric_limits<int32_t>::max()),
            std::numeric_limits<int64_t>::max());
  EXPECT_GT(BackoffCeiling(policy, 62), 0);
}

TEST(BackoffCeiling, AttemptBelowOneIsTreatedAsFirst) {
  const BackoffPolicy policy{3 * kSecond, 60 * kSecond};
  EXPECT_EQ(BackoffCeiling(policy, 0), 3 * kSecond);
  EXPECT_EQ(BackoffCeiling(policy, -5), 3 * kSecond);
}

TEST(BackoffCeiling, ZeroOrNegativeSettingsGiveNoDelay) {
  EXPECT_EQ(BackoffCeiling({0, 60 * kSecond}, 5), 0);
  EXPECT_EQ(BackoffCeiling({-kSecond, 60 * kSecond}, 5), 0);
  EXPECT_EQ(BackoffCeiling({kSecond, 0}, 5), 0);
}

TEST(BackoffDelay, EqualJitterStaysWithinHalfAndFullCeiling) {
  const BackoffPolicy policy{kSecond, 3600 * kSecond};
  for (int attempt = 1; attempt <= 20; ++attempt) {
    const int64_t ceiling = BackoffCeiling(policy, attempt);
    for (double u : {0.0, 0.1, 0.5, 0.9, 0.999999}) {
      const int64_t delay = BackoffDelay(policy, attempt, u);
      EXPECT_GE(delay, ceiling / 2) << "attempt " << attempt << " u " << u;
      EXPECT_LE(delay, ceiling) << "attempt " << attempt << " u " << u;
    }
  }
}

TEST(BackoffDelay, UniformEndsMapToHalfAndNearlyFull) {
  const BackoffPolicy policy{10 * kSecond, 3600 * kSecond};
  EXPECT_EQ(BackoffDelay(policy, 1, 0.0), 5 * kSecond);
  EXPECT_EQ(BackoffDelay(policy, 1, 0.5), 7500000);
  EXPECT_NEAR(static_cast<double>(BackoffDelay(policy, 1, 0.999999)), 10.0 * kSecond, 10.0);
}

TEST(BackoffDelay, IsMonotonicInUniform) {
  const BackoffPolicy policy{kSecond, 60 * kSecond};
  int64_t previous = -1;
  for (int i = 0; i < 1000; ++i) {
    const int64_t delay = BackoffDelay(policy, 4, i / 1000.0);
    EXPECT_GE(delay, previous);
    previous = delay;
  }
}

TEST(BackoffDelay, OutOfRangeUniformFallsBackToTheGuaranteedHalf) {
  const BackoffPolicy policy{8 * kSecond, 60 * kSecond};
  EXPECT_EQ(BackoffDelay(policy, 1, -0.5), 4 * kSecond);
  EXPECT_EQ(BackoffDelay(policy, 1, 1.0), 4 * kSecond);
  EXPECT_EQ(BackoffDelay(policy, 1, std::numeric_limits<double>::quiet_NaN()), 4 * kSecond);
}

TEST(BackoffDelay, RespectsTheCapWithJitter) {
  const BackoffPolicy policy{kSecond, 10 * kSecond};
  EXPECT_LE(BackoffDelay(policy, 30, 0.999), 10 * kSecond);
  EXPECT_GE(BackoffDelay(policy, 30, 0.0), 5 * kSecond);
}

}  // namespace
}  // namespace pgq::core
