#include "core/wait.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

namespace pgq::core {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

TEST(WaitEnd, IsNowPlusTheWait) {
  EXPECT_EQ(WaitEnd(1000, 0), 1000);
  EXPECT_EQ(WaitEnd(1000, 2500000), 2501000);
}

TEST(WaitEnd, SaturatesInsteadOfOverflowing) {
  EXPECT_EQ(WaitEnd(kMax - 10, 11), kMax);
  EXPECT_EQ(WaitEnd(1, kMax), kMax);
  EXPECT_EQ(WaitEnd(kMax, kMax), kMax);
}

TEST(MillisLeft, RoundsUpSoTheLastSleepReachesTheEnd) {
  EXPECT_EQ(MillisLeft(1001, 0), 2);
  EXPECT_EQ(MillisLeft(1000, 0), 1);
  EXPECT_EQ(MillisLeft(1, 0), 1);
  EXPECT_EQ(MillisLeft(2500000, 500000), 2000);
}

TEST(MillisLeft, IsZeroOnceTheEndHasPassed) {
  EXPECT_EQ(MillisLeft(1000, 1000), 0);
  EXPECT_EQ(MillisLeft(1000, 5000), 0);
}

TEST(MillisLeft, AFarEndDoesNotOverflow) { EXPECT_EQ(MillisLeft(kMax, 0), kMax / 1000 + 1); }

}  // namespace
}  // namespace pgq::core
