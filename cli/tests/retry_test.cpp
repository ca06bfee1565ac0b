#include "retry.h"

#include <gtest/gtest.h>

#include <vector>

namespace pgq::cli {
namespace {

using std::chrono::milliseconds;

TEST(Retry, ConnectionErrorsAreRetried) {
  EXPECT_TRUE(IsConnectionError("", ""));  // broke, or never opened
  EXPECT_TRUE(IsConnectionError("", "ERROR"));
  EXPECT_TRUE(IsConnectionError("08006", "FATAL"));
  EXPECT_TRUE(IsConnectionError("08001", "ERROR"));
  EXPECT_TRUE(IsConnectionError("57P01", "FATAL"));
  EXPECT_TRUE(IsConnectionError("57P02", "FATAL"));
  EXPECT_TRUE(IsConnectionError("57P03", "FATAL"));
  EXPECT_TRUE(IsConnectionError("53300", "FATAL"));
  EXPECT_TRUE(IsConnectionError("55000", "FATAL"));  // database not accepting connections
}

TEST(Retry, ServerErrorsAreNot) {
  EXPECT_FALSE(IsConnectionError("55000", "ERROR"));  // object_not_in_prerequisite_state
  EXPECT_FALSE(IsConnectionError("42704", "ERROR"));
  EXPECT_FALSE(IsConnectionError("42501", "ERROR"));
  EXPECT_FALSE(IsConnectionError("57014", "ERROR"));  // query_canceled
  EXPECT_FALSE(IsConnectionError("57P04", "FATAL"));
  EXPECT_FALSE(IsConnectionError("40001", "ERROR"));
  EXPECT_FALSE(IsConnectionError("0", "ERROR"));
}

TEST(Retry, BackoffDoublesFromATenthToTwoSeconds) {
  std::vector<long long> steps;
  milliseconds backoff = kFirstRetry;
  for (int i = 0; i < 8; ++i) {
    steps.push_back(backoff.count());
    backoff = NextBackoff(backoff);
  }
  EXPECT_EQ(steps, (std::vector<long long>{100, 200, 400, 800, 1600, 2000, 2000, 2000}));
}

TEST(Retry, JitterKeepsBetweenHalfAndAll) {
  EXPECT_EQ(Jittered(milliseconds(2000), 0.0), milliseconds(1000));
  EXPECT_EQ(Jittered(milliseconds(2000), 0.5), milliseconds(1500));
  EXPECT_EQ(Jittered(milliseconds(2000), 0.9999), milliseconds(1999));
  EXPECT_EQ(Jittered(milliseconds(100), -1.0), milliseconds(50));
  EXPECT_EQ(Jittered(milliseconds(100), 7.0), milliseconds(100));
}

}  // namespace
}  // namespace pgq::cli
