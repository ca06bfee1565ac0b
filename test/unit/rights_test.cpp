#include "core/rights.h"

#include <gtest/gtest.h>

#include <set>
#include <utility>
#include <vector>

namespace pgq::core {
namespace {

TEST(ParseRight, KnowsTheThreeRightsInAnyCase) {
  EXPECT_EQ(ParseRight("produce"), kProduce);
  EXPECT_EQ(ParseRight("consume"), kConsume);
  EXPECT_EQ(ParseRight("admin"), kAdmin);
  EXPECT_EQ(ParseRight("CONSUME"), kConsume);
  EXPECT_EQ(ParseRight("Admin"), kAdmin);
}

TEST(ParseRight, RefusesEverythingElse) {
  for (const char* word : {"", "all", "read", "produce ", "consumer", "admi", "adminx", "select"}) {
    EXPECT_EQ(ParseRight(word), std::nullopt) << word;
  }
}

TEST(ParseRights, TakesACommaSeparatedList) {
  EXPECT_EQ(ParseRights("produce"), kProduce);
  EXPECT_EQ(ParseRights("produce, consume"), kProduce | kConsume);
  EXPECT_EQ(ParseRights(" admin ,produce,consume "), kAllRights);
  EXPECT_EQ(ParseRights("consume,consume"), kConsume);
}

TEST(ParseRights, RefusesAnEmptyListOrAnUnknownWord) {
  for (const char* list : {"", ",", "produce,", ",consume", "produce,,admin", "produce;admin"}) {
    EXPECT_EQ(ParseRights(list), std::nullopt) << list;
  }
}

TEST(RightName, NamesSingleBitsOnly) {
  EXPECT_EQ(RightName(kProduce), "produce");
  EXPECT_EQ(RightName(kConsume), "consume");
  EXPECT_EQ(RightName(kAdmin), "admin");
  EXPECT_EQ(RightName(kProduce | kConsume), "");
}

// Roles: 10 worker_app, 11 web_app, 12 ops, 13 queue_owner; 20 is a member
// of 10 (a login role in the worker group).
constexpr uint32_t kWorkerApp = 10, kWebApp = 11, kOps = 12, kOwner = 13, kWorkerLogin = 20;

bool HasPrivsOf(uint32_t member, uint32_t role) {
  static const std::set<std::pair<uint32_t, uint32_t>> memberships = {{kWorkerLogin, kWorkerApp}};
  return member == role || memberships.count({member, role}) > 0;
}

std::vector<RightsHolder> Holders() {
  std::vector<RightsHolder> holders = {
      {kWorkerApp, 1, kConsume},    // worker_app consumes queue 1
      {kWebApp, 1, kProduce},       // web_app produces into queue 1
      {kWebApp, 2, kProduce},       // and queue 2
      {kOps, kEveryQueue, kAdmin},  // ops administers every queue
      {kOwner, 3, kAllRights},      // queue 3's owner
  };
  std::sort(holders.begin(), holders.end());
  return holders;
}

TEST(HoldsRight, AGrantOnAQueueCountsForThatQueueAndRightOnly) {
  const auto holders = Holders();
  EXPECT_TRUE(HoldsRight(holders, kWorkerApp, 1, kConsume, HasPrivsOf));
  EXPECT_FALSE(HoldsRight(holders, kWorkerApp, 2, kConsume, HasPrivsOf));
  EXPECT_FALSE(HoldsRight(holders, kWorkerApp, 1, kProduce, HasPrivsOf));
  EXPECT_FALSE(HoldsRight(holders, kWebApp, 1, kConsume, HasPrivsOf));  // a producer cannot claim
  EXPECT_TRUE(HoldsRight(holders, kWebApp, 2, kProduce, HasPrivsOf));
}

TEST(HoldsRight, AnyOfSeveralWantedRightsIsEnough) {
  const auto holders = Holders();
  EXPECT_TRUE(HoldsRight(holders, kWebApp, 1, kProduce | kAdmin, HasPrivsOf));
  EXPECT_FALSE(HoldsRight(holders, kWebApp, 1, kConsume | kAdmin, HasPrivsOf));
}

TEST(HoldsRight, AGrantForEveryQueueCountsForEachQueueAndForEveryQueue) {
  const auto holders = Holders();
  for (const int32_t queue : {1, 2, 3, 99}) {
    EXPECT_TRUE(HoldsRight(holders, kOps, queue, kAdmin, HasPrivsOf)) << queue;
    EXPECT_FALSE(HoldsRight(holders, kOps, queue, kConsume, HasPrivsOf)) << queue;
  }
  EXPECT_TRUE(HoldsRight(holders, kOps, kEveryQueue, kAdmin, HasPrivsOf));
  // A grant on one queue is not a grant on every queue.
  EXPECT_FALSE(HoldsRight(holders, kWorkerApp, kEveryQueue, kConsume, HasPrivsOf));
  EXPECT_FALSE(HoldsRight(holders, kOwner, kEveryQueue, kAdmin, HasPrivsOf));
}

TEST(HoldsRight, TheOwnerHoldsEveryRightOnItsQueueOnly) {
  const auto holders = Holders();
  for (const uint8_t right : {kProduce, kConsume, kAdmin}) {
    EXPECT_TRUE(HoldsRight(holders, kOwner, 3, right, HasPrivsOf));
    EXPECT_FALSE(HoldsRight(holders, kOwner, 1, right, HasPrivsOf));
  }
}

TEST(HoldsRight, AMemberHoldsWhatItsGroupWasGranted) {
  const auto holders = Holders();
  EXPECT_TRUE(HoldsRight(holders, kWorkerLogin, 1, kConsume, HasPrivsOf));
  EXPECT_FALSE(HoldsRight(holders, kWorkerLogin, 1, kProduce, HasPrivsOf));
  // Not the other way round: the group does not hold what a member holds.
  const std::vector<RightsHolder> member_only = {{kWorkerLogin, 1, kConsume}};
  EXPECT_FALSE(HoldsRight(member_only, kWorkerApp, 1, kConsume, HasPrivsOf));
}

TEST(HoldsRight, NobodyHoldsAnythingWithoutAHolder) {
  const std::vector<RightsHolder> none;
  EXPECT_FALSE(HoldsRight(none, kWorkerApp, 1, kAllRights, HasPrivsOf));
  EXPECT_FALSE(HoldsRightAnywhere(none, kWorkerApp, kAllRights, HasPrivsOf));
}

TEST(HoldsRightAnywhere, LooksAtEveryQueue) {
  const auto holders = Holders();
  EXPECT_TRUE(HoldsRightAnywhere(holders, kWorkerApp, kConsume, HasPrivsOf));
  EXPECT_FALSE(HoldsRightAnywhere(holders, kWorkerApp, kProduce, HasPrivsOf));
  EXPECT_TRUE(HoldsRightAnywhere(holders, kWorkerLogin, kConsume, HasPrivsOf));
  EXPECT_FALSE(HoldsRightAnywhere(holders, kWebApp, kConsume, HasPrivsOf));
  EXPECT_TRUE(HoldsRightAnywhere(holders, kOwner, kConsume, HasPrivsOf));
}

}  // namespace
}  // namespace pgq::core
