#include "failure_text.h"

#include <sys/wait.h>

#include <gtest/gtest.h>

namespace pgq::cli {
namespace {

// waitpid() statuses as Linux encodes them.
int Exited(int code) { return code << 8; }
int Killed(int signo) { return signo; }

TEST(FailureText, StatusOnly) {
  StderrTail empty;
  EXPECT_EQ(FailureText(Exited(3), empty), "exit status 3");
  EXPECT_EQ(FailureText(Killed(9), empty), "killed by signal 9");
  StderrTail blank;
  blank.Append(" \n\n");
  EXPECT_EQ(FailureText(Exited(1), blank), "exit status 1");
}

TEST(FailureText, StatusThenStderrTrimmed) {
  StderrTail tail;
  tail.Append("smtp: connection refused\n");
  EXPECT_EQ(FailureText(Exited(75), tail), "exit status 75\nsmtp: connection refused");
}

TEST(StderrTail, KeepsTheEnd) {
  StderrTail tail(8);
  tail.Append("abc");
  EXPECT_FALSE(tail.truncated());
  tail.Append("defgh");
  EXPECT_EQ(tail.bytes(), "abcdefgh");
  EXPECT_FALSE(tail.truncated());
  tail.Append("ij");
  EXPECT_EQ(tail.bytes(), "cdefghij");
  EXPECT_TRUE(tail.truncated());
  StderrTail big(4);
  big.Append("0123456789");
  EXPECT_EQ(big.bytes(), "6789");
  EXPECT_TRUE(big.truncated());
  StderrTail exact(4);
  exact.Append("0123");
  EXPECT_FALSE(exact.truncated());
}

TEST(FailureText, TruncatedTailIsMarkedAndBounded) {
  StderrTail tail;
  tail.Append("HEAD-MARKER" + std::string(10000, 'x') + "TAIL-MARKER\n");
  const std::string text = FailureText(Exited(2), tail);
  EXPECT_EQ(text.rfind("exit status 2\n...", 0), 0u);
  EXPECT_EQ(text.find("HEAD-MARKER"), std::string::npos);
  EXPECT_EQ(text.substr(text.size() - 11), "TAIL-MARKER");
  EXPECT_LE(text.size(), kStderrTailBytes + 32);
}

TEST(SanitizeUtf8, KeepsValidText) {
  const std::string text = "plain, é, €, 𝄞";
  EXPECT_EQ(SanitizeUtf8(text, false), text);
}

TEST(SanitizeUtf8, ReplacesInvalidBytesAndNul) {
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(SanitizeUtf8(std::string("a\0b", 3), false), "a" + fffd + "b");
  EXPECT_EQ(SanitizeUtf8("\xFF\xFE", false), fffd + fffd);
  EXPECT_EQ(SanitizeUtf8("\xC0\xAF", false), fffd + fffd);             // overlong '/'
  EXPECT_EQ(SanitizeUtf8("\xED\xA0\x80", false), fffd + fffd + fffd);  // surrogate
  EXPECT_EQ(SanitizeUtf8("x\xE2\x82", false), "x" + fffd + fffd);      // cut at the end
}

TEST(SanitizeUtf8, DropsACharacterCutAtTheFront) {
  // The last two bytes of "€" (E2 82 AC), as a 4 kB cut can leave them.
  EXPECT_EQ(SanitizeUtf8("\x82\xAC ok", true), " ok");
  EXPECT_EQ(SanitizeUtf8("\x82\xAC ok", false), "\xEF\xBF\xBD\xEF\xBF\xBD ok");
}

}  // namespace
}  // namespace pgq::cli
