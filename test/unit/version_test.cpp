#include "core/version.h"

#include <gtest/gtest.h>

namespace pgq::core {
namespace {

TEST(CompareVersions, OrdersTheReleasesAsTheUpdateChain) {
  const char* chain[] = {"1.0", "1.1", "1.2", "2.0", "2.0.1", "2.1", "2.10", "3.0", "3.1"};
  for (std::size_t i = 0; i < sizeof(chain) / sizeof(chain[0]); ++i) {
    EXPECT_EQ(CompareVersions(chain[i], chain[i]), 0) << chain[i];
    for (std::size_t j = i + 1; j < sizeof(chain) / sizeof(chain[0]); ++j) {
      EXPECT_LT(CompareVersions(chain[i], chain[j]), 0) << chain[i] << " " << chain[j];
      EXPECT_GT(CompareVersions(chain[j], chain[i]), 0) << chain[j] << " " << chain[i];
    }
  }
}

TEST(CompareVersions, AMissingNumberIsZero) {
  EXPECT_EQ(CompareVersions("2.1", "2.1.0"), 0);
  EXPECT_LT(CompareVersions("2", "2.0.1"), 0);
}

TEST(CompareVersions, TextThatIsNotAReleaseNeverEqualsOne) {
  EXPECT_NE(CompareVersions("2.1beta", "2.1"), 0);
  EXPECT_NE(CompareVersions("", "2.1"), 0);
  EXPECT_EQ(CompareVersions("dev", "dev"), 0);
}

}  // namespace
}  // namespace pgq::core
