#include "options.h"

#include <gtest/gtest.h>

namespace pgq::cli {
namespace {

ParseResult Parse(std::vector<std::string> args) { return ParseOptions(args); }

TEST(Options, DefaultsAndCommandAfterDoubleDash) {
  const ParseResult r = Parse({"--queue", "thumbnails", "--", "./make_thumbnail.sh", "--size=2"});
  ASSERT_EQ(r.status, ParseStatus::kRun) << r.error;
  EXPECT_EQ(r.options.queues, (std::vector<std::string>{"thumbnails"}));
  EXPECT_EQ(r.options.concurrency, 1);
  EXPECT_EQ(r.options.prefetch, 0);
  EXPECT_EQ(r.options.max_jobs, 0);
  EXPECT_EQ(r.options.wait, "30 seconds");
  EXPECT_TRUE(r.options.lease.empty());
  EXPECT_TRUE(r.options.dsn.empty());
  // Options of the command are the command's.
  EXPECT_EQ(r.options.command, (std::vector<std::string>{"./make_thumbnail.sh", "--size=2"}));
}

TEST(Options, EveryOptionBothForms) {
  const ParseResult r =
      Parse({"--queue=q", "--dsn", "host=/tmp dbname=x", "--concurrency=4", "--prefetch", "2",
             "--lease", "2 seconds", "--wait=5s", "--max-jobs", "7", "-v", "sh", "-c", "cat"});
  ASSERT_EQ(r.status, ParseStatus::kRun) << r.error;
  EXPECT_EQ(r.options.dsn, "host=/tmp dbname=x");
  EXPECT_EQ(r.options.concurrency, 4);
  EXPECT_EQ(r.options.prefetch, 2);
  EXPECT_EQ(r.options.lease, "2 seconds");
  EXPECT_EQ(r.options.wait, "5s");
  EXPECT_EQ(r.options.max_jobs, 7);
  EXPECT_TRUE(r.options.verbose);
  EXPECT_EQ(r.options.command, (std::vector<std::string>{"sh", "-c", "cat"}));
}

TEST(Options, SeveralQueuesInTheOrderGiven) {
  const ParseResult r = Parse({"--queue", "render", "--queue=send", "--concurrency", "2", "--queue",
                               "b\"'; x", "--", "./step.sh"});
  ASSERT_EQ(r.status, ParseStatus::kRun) << r.error;
  // Names are kept as given (the server checks them; they reach it as parameters).
  EXPECT_EQ(r.options.queues, (std::vector<std::string>{"render", "send", "b\"'; x"}));
  EXPECT_EQ(r.options.concurrency, 2);
}

TEST(Options, AQueueGivenTwiceIsAnError) {
  const ParseResult r =
      Parse({"--queue", "render", "--queue", "send", "--queue=render", "--", "true"});
  EXPECT_EQ(r.status, ParseStatus::kUsageError);
  EXPECT_EQ(r.error, "--queue render is given twice");
  const ParseResult empty = Parse({"--queue", "render", "--queue", "", "--", "true"});
  EXPECT_EQ(empty.status, ParseStatus::kUsageError);
  EXPECT_EQ(empty.error, "--queue must not be empty");
}

TEST(Options, ExitCodesAndIntervalsDefaults) {
  const ParseResult r = Parse({"--queue", "q", "--", "true"});
  ASSERT_EQ(r.status, ParseStatus::kRun) << r.error;
  EXPECT_EQ(r.options.unknown_exit_code, 0);  // none: every non-zero status fails the job
  EXPECT_EQ(r.options.snooze_exit_code, 0);
  EXPECT_EQ(r.options.snooze_delay, "1 minute");
  EXPECT_EQ(r.options.kill_grace, "10 seconds");
}

TEST(Options, ExitCodesAndIntervalsBothForms) {
  const ParseResult r =
      Parse({"--queue", "q", "--unknown-exit-code", "75", "--snooze-exit-code=255",
             "--snooze-delay", "30 seconds", "--kill-grace=0", "--", "true"});
  ASSERT_EQ(r.status, ParseStatus::kRun) << r.error;
  EXPECT_EQ(r.options.unknown_exit_code, 75);
  EXPECT_EQ(r.options.snooze_exit_code, 255);
  EXPECT_EQ(r.options.snooze_delay, "30 seconds");
  EXPECT_EQ(r.options.kill_grace, "0");  // read as an interval by the server, at start
  const ParseResult lowest =
      Parse({"--queue", "q", "--snooze-exit-code=1", "--unknown-exit-code=2", "--", "true"});
  ASSERT_EQ(lowest.status, ParseStatus::kRun) << lowest.error;
  EXPECT_EQ(lowest.options.snooze_exit_code, 1);
  EXPECT_EQ(lowest.options.unknown_exit_code, 2);
}

TEST(Options, ExitCodesMustDiffer) {
  const ParseResult r =
      Parse({"--queue", "q", "--unknown-exit-code", "9", "--snooze-exit-code", "9", "--", "true"});
  EXPECT_EQ(r.status, ParseStatus::kUsageError);
  EXPECT_EQ(r.error, "--unknown-exit-code and --snooze-exit-code must differ");
}

TEST(Options, ExitCodeErrorsSayTheRange) {
  const ParseResult r = Parse({"--queue", "q", "--unknown-exit-code", "0", "--", "true"});
  EXPECT_EQ(r.status, ParseStatus::kUsageError);
  EXPECT_EQ(r.error, "--unknown-exit-code must be a number from 1 to 255");
}

TEST(Options, OnceIsOneJob) {
  const ParseResult r = Parse({"--once", "--queue", "q", "--", "true"});
  ASSERT_EQ(r.status, ParseStatus::kRun) << r.error;
  EXPECT_EQ(r.options.max_jobs, 1);
}

TEST(Options, Help) { EXPECT_EQ(Parse({"--queue", "q", "--help"}).status, ParseStatus::kHelp); }

TEST(Options, UsageErrors) {
  const std::vector<std::vector<std::string>> bad = {
      {},
      {"--queue", "q"},                                // no command
      {"--queue", "q", "--"},                          // no command
      {"--", "true"},                                  // no queue
      {"--queue=", "--", "true"},                      // empty queue
      {"--queue", "q", "--queue", "q", "--", "true"},  // the same queue twice
      {"--queue", "q", "--queue"},                     // no value
      {"--queue"},                                     // no value
      {"--queue", "q", "--concurrency", "0", "--", "true"},
      {"--queue", "q", "--concurrency", "257", "--", "true"},
      {"--queue", "q", "--concurrency", "2x", "--", "true"},
      {"--queue", "q", "--concurrency", "", "--", "true"},
      {"--queue", "q", "--prefetch", "-1", "--", "true"},
      {"--queue", "q", "--max-jobs", "0", "--", "true"},
      {"--queue", "q", "--once", "--max-jobs", "2", "--", "true"},
      {"--queue", "q", "--lease=", "--", "true"},
      {"--queue", "q", "--bogus", "--", "true"},
      {"--queue", "q", "--", ""},
      {"--queue", "q", "--unknown-exit-code", "0", "--", "true"},  // 0 is success
      {"--queue", "q", "--unknown-exit-code", "256", "--", "true"},
      {"--queue", "q", "--unknown-exit-code", "-1", "--", "true"},
      {"--queue", "q", "--unknown-exit-code", "7x", "--", "true"},
      {"--queue", "q", "--unknown-exit-code=", "--", "true"},
      {"--queue", "q", "--unknown-exit-code"},  // no value
      {"--queue", "q", "--snooze-exit-code", "0", "--", "true"},
      {"--queue", "q", "--snooze-exit-code", "300", "--", "true"},
      {"--queue", "q", "--snooze-exit-code", " 3", "--", "true"},
      {"--queue", "q", "--snooze-exit-code=3", "--unknown-exit-code=3", "--", "true"},
      {"--queue", "q", "--snooze-delay=", "--", "true"},
      {"--queue", "q", "--kill-grace", "", "--", "true"},
      {"--queue", "q", "--kill-grace"},
  };
  for (const auto& args : bad) {
    const ParseResult r = Parse(args);
    std::string joined;
    for (const auto& a : args) joined += "[" + a + "]";
    EXPECT_EQ(r.status, ParseStatus::kUsageError) << joined;
    EXPECT_FALSE(r.error.empty()) << joined;
  }
}

}  // namespace
}  // namespace pgq::cli
