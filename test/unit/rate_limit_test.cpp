#include "core/rate_limit.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace pgq::core {
namespace {

TEST(RateLimit, ValidLimits) {
  EXPECT_TRUE(IsValidRateLimit(0.5));
  EXPECT_TRUE(IsValidRateLimit(1000));
  EXPECT_FALSE(IsValidRateLimit(0));
  EXPECT_FALSE(IsValidRateLimit(-1));
  EXPECT_FALSE(IsValidRateLimit(std::numeric_limits<double>::infinity()));
  EXPECT_FALSE(IsValidRateLimit(std::nan("")));
}

TEST(RateLimit, BurstIsOneSecondAndAtLeastOne) {
  EXPECT_EQ(BucketBurst(50), 50);
  EXPECT_EQ(BucketBurst(0.2), 1);
}

TEST(RateLimit, AFullBucketGivesItsBurstThenNothing) {
  TokenBucket bucket = FullBucket(10, 0);
  EXPECT_EQ(TakeTokens(bucket, 10, 0, 4), 4);
  EXPECT_EQ(TakeTokens(bucket, 10, 0, 100), 6);
  EXPECT_EQ(TakeTokens(bucket, 10, 0, 1), 0);
}

TEST(RateLimit, RefillsAtTheRateUpToTheBurst) {
  TokenBucket bucket = FullBucket(10, 0);
  ASSERT_EQ(TakeTokens(bucket, 10, 0, 10), 10);
  EXPECT_EQ(TakeTokens(bucket, 10, 250'000, 10), 2);  // 2.5 tokens after 0.25 s
  EXPECT_EQ(TakeTokens(bucket, 10, 350'000, 10), 1);  // 0.5 + 1.0
  EXPECT_EQ(TakeTokens(bucket, 10, 100'000'000, 100), 10);
}

TEST(RateLimit, UnusedTokensComeBack) {
  TokenBucket bucket = FullBucket(5, 0);
  ASSERT_EQ(TakeTokens(bucket, 5, 0, 5), 5);
  ReturnTokens(bucket, 5, 3);
  EXPECT_EQ(TakeTokens(bucket, 5, 0, 5), 3);
  ReturnTokens(bucket, 5, 100);
  EXPECT_EQ(bucket.tokens, 5);
}

TEST(RateLimit, ClockGoingBackwardsRefillsNothing) {
  TokenBucket bucket = FullBucket(10, 1'000'000);
  ASSERT_EQ(TakeTokens(bucket, 10, 1'000'000, 10), 10);
  EXPECT_EQ(TakeTokens(bucket, 10, 0, 10), 0);
}

TEST(RateLimit, ALoweredLimitCapsTheTokensKept) {
  TokenBucket bucket = FullBucket(100, 0);
  EXPECT_EQ(TakeTokens(bucket, 2, 0, 100), 2);
}

TEST(RateLimit, WaitForTheNextToken) {
  TokenBucket bucket = FullBucket(4, 0);
  ASSERT_EQ(TakeTokens(bucket, 4, 0, 4), 4);
  EXPECT_EQ(MicrosUntilToken(bucket, 4), 250'000);
  bucket.tokens = 1.0;
  EXPECT_EQ(MicrosUntilToken(bucket, 4), 0);
}

// Over any run of calls, what was handed out never exceeds burst + rate * t.
TEST(RateLimit, NeverMoreThanBurstPlusRateTimesTime) {
  const double rate = 7.5;
  TokenBucket bucket = FullBucket(rate, 0);
  int64_t given = 0;
  int64_t now = 0;
  for (int i = 0; i < 100000; ++i) {
    now += (i * 7919) % 5000;
    given += TakeTokens(bucket, rate, now, 1 + i % 4);
    ASSERT_LE(static_cast<double>(given),
              BucketBurst(rate) + rate * static_cast<double>(now) / 1e6 + 1e-9);
  }
  EXPECT_GT(static_cast<double>(given), 0.95 * rate * static_cast<double>(now) / 1e6);
}

}  // namespace
}  // namespace pgq::core
