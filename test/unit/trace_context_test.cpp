#include "core/trace_context.h"

#include <gtest/gtest.h>

#include <string>

namespace pgq::core {
namespace {

constexpr std::string_view kValid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

std::optional<std::string> Normalize(std::string_view value, std::string* why = nullptr) {
  std::string ignored;
  return NormalizeTraceparent(value, why != nullptr ? why : &ignored);
}

TEST(TraceContext, AVersion00TraceparentIsKeptAsItIs) {
  ASSERT_EQ(kValid.size(), kTraceparentBytes);
  EXPECT_EQ(Normalize(kValid), std::string(kValid));
  EXPECT_EQ(TraceIdOf(*Normalize(kValid)), "4bf92f3577b34da6a3ce929d0e0e4736");
  // Flags other than 01 are kept (every bit).
  EXPECT_EQ(Normalize("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff"),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff");
}

TEST(TraceContext, ALaterVersionIsReadAsVersion00) {
  EXPECT_EQ(Normalize("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            std::string(kValid));
  EXPECT_EQ(Normalize("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes-next"),
            std::string(kValid));
  std::string why;
  EXPECT_FALSE(Normalize("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", &why));
  EXPECT_EQ(why, "A later version's fields after the flags start with '-'.");
}

TEST(TraceContext, EveryRuleRefusesWithItsReason) {
  const std::pair<std::string, std::string> cases[] = {
      {"", "It is shorter than 55 bytes."},
      {std::string(kValid.substr(0, 54)), "It is shorter than 55 bytes."},
      {std::string(kValid) + "0", "A version 00 traceparent is 55 bytes."},
      {"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
       "Its version is ff, which is invalid."},
      {"0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
       "Its version is not 2 lowercase hex digits."},
      {"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
       "Its fields are not separated by '-' at bytes 3, 36 and 53."},
      {"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
       "Its trace-id is not 32 lowercase hex digits."},
      {"00-00000000000000000000000000000000-00f067aa0ba902b7-01", "Its trace-id is all zeros."},
      {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902bz-01",
       "Its parent-id is not 16 lowercase hex digits."},
      {"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "Its parent-id is all zeros."},
      {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0G",
       "Its flags are not 2 lowercase hex digits."},
      {"00-4bf92f3577b34da6a3ce929d0e0e4736\n00f067aa0ba902b7-01x",
       "A version 00 traceparent is 55 bytes."},
  };
  for (const auto& [value, reason] : cases) {
    std::string why;
    EXPECT_FALSE(Normalize(value, &why)) << value;
    EXPECT_EQ(why, reason) << value;
  }
}

TEST(TraceContext, TracestatesByTheW3CRules) {
  std::string why;
  for (std::string_view valid :
       {"", "rojo=00f067aa0ba902b7", "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7",
        " rojo=1 ,\tcongo=2 ", "x=1,,y=2" /* an empty member */, "tenant1@vendor=v",
        "0tenant@sys=v", "k_-*/9=v"}) {
    EXPECT_TRUE(IsValidTracestate(valid, &why)) << valid << ": " << why;
  }
  const std::pair<std::string, std::string> invalid[] = {
      {"Rojo=1", "A member is not key=value by the W3C rules."},
      {"0rojo=1", "A member is not key=value by the W3C rules."},
      {"rojo", "A member is not key=value by the W3C rules."},
      {"rojo=", "A member is not key=value by the W3C rules."},
      {"rojo=a=b", "A member is not key=value by the W3C rules."},
      {"rojo=a\x01b", "A member is not key=value by the W3C rules."},
      {"rojo=\x7f", "A member is not key=value by the W3C rules."},
      {"tenant@Sys=v", "A member is not key=value by the W3C rules."},
      {"tenant@systemnamelonger=v", "A member is not key=value by the W3C rules."},
      {"rojo=1,rojo=2", "A key appears twice."},
      {std::string(513, 'a'), "It is longer than 512 bytes."},
  };
  for (const auto& [value, reason] : invalid) {
    EXPECT_FALSE(IsValidTracestate(value, &why)) << value;
    EXPECT_EQ(why, reason) << value;
  }
  // 32 members pass, 33 do not.
  std::string members;
  for (int i = 0; i < 33; ++i) {
    if (i == 32) {
      EXPECT_TRUE(IsValidTracestate(members, &why)) << why;
    }
    members += (i > 0 ? "," : "") + std::string("k") + std::to_string(i) + "=v";
  }
  EXPECT_FALSE(IsValidTracestate(members, &why));
  EXPECT_EQ(why, "It has more than 32 members.");
  // A value of 256 characters passes, 257 do not.
  EXPECT_TRUE(IsValidTracestate("k=" + std::string(256, 'v'), &why));
  EXPECT_FALSE(IsValidTracestate("k=" + std::string(257, 'v'), &why));
}

TEST(TraceContext, TheStoredFormJoinsAndSplitsAtByte55) {
  std::string why;
  EXPECT_EQ(StoredContext(kValid, "", &why), std::string(kValid));
  EXPECT_EQ(StoredContext(kValid, " , ,", &why), std::string(kValid));  // nothing said
  const std::optional<std::string> stored = StoredContext(kValid, "congo=t61;rcWkgMzE", &why);
  ASSERT_TRUE(stored) << why;
  EXPECT_EQ(*stored, std::string(kValid) + ";congo=t61;rcWkgMzE");
  const TraceContext parts = SplitContext(*stored);
  EXPECT_EQ(parts.traceparent, kValid);
  EXPECT_EQ(parts.tracestate, "congo=t61;rcWkgMzE");  // a value may hold ';'
  EXPECT_EQ(SplitContext(kValid).tracestate, "");
  // The setting's text: the same form, normalized, checked as a whole.
  EXPECT_EQ(
      NormalizeStoredContext("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01;a=1", &why),
      std::string(kValid) + ";a=1");
  EXPECT_FALSE(NormalizeStoredContext(std::string(kValid) + ";A=1", &why));
  EXPECT_EQ(why, "tracestate: A member is not key=value by the W3C rules.");
  EXPECT_FALSE(
      NormalizeStoredContext("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", &why));
  EXPECT_FALSE(StoredContext("garbage", "a=1", &why));
}

TEST(TraceContext, ANewTraceparentIsValidAndNeverAllZeros) {
  unsigned char random[24] = {};
  std::string why;
  const std::string zeros = NewTraceparent(random);
  EXPECT_TRUE(NormalizeTraceparent(zeros, &why)) << zeros << ": " << why;
  EXPECT_EQ(zeros, "00-00000000000000000000000000000001-0000000000000001-01");
  for (int i = 0; i < 24; ++i) random[i] = static_cast<unsigned char>(i * 11 + 7);
  const std::string made = NewTraceparent(random);
  EXPECT_EQ(made, "00-07121d28333e49545f6a75808b96a1ac-b7c2cdd8e3eef904-01");
  EXPECT_EQ(NormalizeTraceparent(made, &why), made);
}

}  // namespace
}  // namespace pgq::core
