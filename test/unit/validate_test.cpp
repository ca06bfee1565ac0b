#include "core/validate.h"

#include <gtest/gtest.h>

#include <string>

namespace pgq::core {
namespace {

TEST(QueueName, AcceptsTheDocumentedAlphabet) {
  EXPECT_TRUE(IsValidQueueName("emails"));
  EXPECT_TRUE(IsValidQueueName("a"));
  EXPECT_TRUE(IsValidQueueName("9lives"));
  EXPECT_TRUE(IsValidQueueName("meta.whatsapp-out_v2"));
  EXPECT_TRUE(IsValidQueueName(std::string(63, 'q')));
}

TEST(QueueName, RejectsEverythingElse) {
  EXPECT_FALSE(IsValidQueueName(""));
  EXPECT_FALSE(IsValidQueueName(std::string(64, 'q')));
  EXPECT_FALSE(IsValidQueueName("Emails"));
  EXPECT_FALSE(IsValidQueueName("_private"));
  EXPECT_FALSE(IsValidQueueName(".hidden"));
  EXPECT_FALSE(IsValidQueueName("-dash"));
  EXPECT_FALSE(IsValidQueueName("with space"));
  EXPECT_FALSE(IsValidQueueName("semi;colon"));
  EXPECT_FALSE(IsValidQueueName("quote'"));
  EXPECT_FALSE(IsValidQueueName(std::string("nul\0byte", 8)));
  EXPECT_FALSE(IsValidQueueName("caf\xc3\xa9"));
}

TEST(Lease, MustBePositiveAndWithinTheMaximum) {
  constexpr int64_t kDay = 86400LL * 1000000;
  EXPECT_EQ(CheckLease(1, kDay), LeaseCheck::kOk);
  EXPECT_EQ(CheckLease(kDay, kDay), LeaseCheck::kOk);
  EXPECT_EQ(CheckLease(0, kDay), LeaseCheck::kNotPositive);
  EXPECT_EQ(CheckLease(-1, kDay), LeaseCheck::kNotPositive);
  EXPECT_EQ(CheckLease(kDay + 1, kDay), LeaseCheck::kTooLong);
}

TEST(ClaimBatch, IsOneToTenThousand) {
  EXPECT_FALSE(IsValidClaimBatch(0));
  EXPECT_TRUE(IsValidClaimBatch(1));
  EXPECT_TRUE(IsValidClaimBatch(10000));
  EXPECT_FALSE(IsValidClaimBatch(10001));
  EXPECT_FALSE(IsValidClaimBatch(-1));
}

TEST(DedupeKey, IsOneTo512Bytes) {
  EXPECT_FALSE(IsValidDedupeKey(""));
  EXPECT_TRUE(IsValidDedupeKey("welcome:42"));
  EXPECT_TRUE(IsValidDedupeKey(std::string(kMaxDedupeKeyBytes, 'k')));
  EXPECT_FALSE(IsValidDedupeKey(std::string(kMaxDedupeKeyBytes + 1, 'k')));
}

TEST(CoordinationKey, IsOneTo512Bytes) {
  EXPECT_EQ(kMaxKeyBytes, 512u);
  EXPECT_FALSE(IsValidKey(""));
  EXPECT_TRUE(IsValidKey("x"));
  EXPECT_TRUE(IsValidKey("sales team"));
  EXPECT_TRUE(IsValidKey("caf\xc3\xa9"));
  EXPECT_TRUE(IsValidKey(std::string(kMaxKeyBytes, 'k')));
  EXPECT_FALSE(IsValidKey(std::string(kMaxKeyBytes + 1, 'k')));
  // The limit counts bytes: 256 two-byte characters fit, 257 do not.
  std::string e_acute_256;
  for (int i = 0; i < 256; ++i) e_acute_256 += "\xc3\xa9";
  EXPECT_TRUE(IsValidKey(e_acute_256));
  EXPECT_FALSE(IsValidKey(e_acute_256 + "\xc3\xa9"));
}

TEST(MaxAttempts, IsAtLeastOne) {
  EXPECT_FALSE(IsValidMaxAttempts(0));
  EXPECT_TRUE(IsValidMaxAttempts(1));
  EXPECT_TRUE(IsValidMaxAttempts(kMaxAttemptsLimit));
  EXPECT_FALSE(IsValidMaxAttempts(kMaxAttemptsLimit + 1));
}

}  // namespace
}  // namespace pgq::core
