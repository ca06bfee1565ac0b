// ParseSchedule: cron fields, names, macros, @every, and the error messages.
#include "core/cron.h"
#include "cron_test_support.h"

#include <gtest/gtest.h>

#include <bitset>
#include <cstddef>
#include <string>
#include <vector>

namespace pgq::core::cron_test {
namespace {

// ---------------------------------------------------------------------------
// Helpers

template <std::size_t N>
std::vector<int> Members(const std::bitset<N>& bits) {
  std::vector<int> out;
  for (std::size_t i = 0; i < N; ++i) {
    if (bits[i]) out.push_back(static_cast<int>(i));
  }
  return out;
}

std::vector<int> Range(int low, int high, int step = 1) {
  std::vector<int> out;
  for (int v = low; v <= high; v += step) out.push_back(v);
  return out;
}

// The message ParseSchedule gives for `spec`, which must be rejected.
std::string ErrorOf(const std::string& spec) {
  ScheduleSpec parsed;
  std::string error;
  EXPECT_FALSE(ParseSchedule(spec, &parsed, &error)) << spec;
  return error;
}

// ---------------------------------------------------------------------------
// Parsing

TEST(ParseSchedule, StarsMatchEveryValueAndAreUnrestricted) {
  const CronSpec c = Cron("* * * * *");
  EXPECT_EQ(Members(c.minutes), Range(0, 59));
  EXPECT_EQ(Members(c.hours), Range(0, 23));
  EXPECT_EQ(Members(c.days), Range(1, 31));
  EXPECT_EQ(Members(c.months), Range(1, 12));
  EXPECT_EQ(Members(c.weekdays), Range(0, 6));
  EXPECT_FALSE(c.days_restricted);
  EXPECT_FALSE(c.weekdays_restricted);
}

TEST(ParseSchedule, NumbersListsRangesAndSteps) {
  const CronSpec c = Cron("5,10-12,40-50/5 */6 1/10 2-11/3 1-5");
  EXPECT_EQ(Members(c.minutes), (std::vector<int>{5, 10, 11, 12, 40, 45, 50}));
  EXPECT_EQ(Members(c.hours), (std::vector<int>{0, 6, 12, 18}));
  EXPECT_EQ(Members(c.days), (std::vector<int>{1, 11, 21, 31}));  // a/n: a to the maximum
  EXPECT_EQ(Members(c.months), (std::vector<int>{2, 5, 8, 11}));
  EXPECT_EQ(Members(c.weekdays), Range(1, 5));
  EXPECT_TRUE(c.days_restricted);
  EXPECT_TRUE(c.weekdays_restricted);
}

TEST(ParseSchedule, StepsStartAtTheFieldsMinimum) {
  EXPECT_EQ(Members(Cron("*/15 * * * *").minutes), (std::vector<int>{0, 15, 30, 45}));
  EXPECT_EQ(Members(Cron("0 * */10 * *").days), (std::vector<int>{1, 11, 21, 31}));
  EXPECT_EQ(Members(Cron("0 * * */4 *").months), (std::vector<int>{1, 5, 9}));
  EXPECT_EQ(Members(Cron("0 * * * */2").weekdays), (std::vector<int>{0, 2, 4, 6}));
  EXPECT_EQ(Members(Cron("*/59 * * * *").minutes), (std::vector<int>{0, 59}));
  EXPECT_EQ(Members(Cron("*/1 * * * *").minutes), Range(0, 59));
  EXPECT_EQ(Members(Cron("7/20 * * * *").minutes), (std::vector<int>{7, 27, 47}));
  EXPECT_EQ(Members(Cron("59/5 * * * *").minutes), (std::vector<int>{59}));
}

TEST(ParseSchedule, WeekdayStepsEndAtSaturday) {
  // "1/2" is MON,WED,FRI, not also 7 (Sunday).
  EXPECT_EQ(Members(Cron("0 0 * * 1/2").weekdays), (std::vector<int>{1, 3, 5}));
  EXPECT_EQ(Members(Cron("0 0 * * 7/2").weekdays), (std::vector<int>{0}));
  EXPECT_EQ(Members(Cron("0 0 * * 0-7/7").weekdays), (std::vector<int>{0}));
}

TEST(ParseSchedule, MonthAndWeekdayNamesInAnyCase) {
  const CronSpec c = Cron("0 0 * jan,Mar,DEC mon-FRI");
  EXPECT_EQ(Members(c.months), (std::vector<int>{1, 3, 12}));
  EXPECT_EQ(Members(c.weekdays), Range(1, 5));
  EXPECT_EQ(Members(Cron("0 0 * FEB-apr/2 *").months), (std::vector<int>{2, 4}));
  EXPECT_EQ(Members(Cron("0 0 * * sun,SAT").weekdays), (std::vector<int>{0, 6}));
  EXPECT_EQ(Members(Cron("0 0 * * TUE,thu").weekdays), (std::vector<int>{2, 4}));
  EXPECT_EQ(Members(Cron("0 0 * JUN-AUG WED").months), (std::vector<int>{6, 7, 8}));
}

TEST(ParseSchedule, WeekdaySevenIsSunday) {
  EXPECT_EQ(Members(Cron("0 0 * * 7").weekdays), (std::vector<int>{0}));
  EXPECT_EQ(Members(Cron("0 0 * * 5-7").weekdays), (std::vector<int>{0, 5, 6}));
  EXPECT_EQ(Members(Cron("0 0 * * 0-7").weekdays), Range(0, 6));
  EXPECT_EQ(Members(Cron("0 0 * * FRI-7").weekdays), (std::vector<int>{0, 5, 6}));
}

TEST(ParseSchedule, RestrictedMeansAnythingButALoneStar) {
  EXPECT_TRUE(Cron("0 0 */2 * *").days_restricted);  // unlike Vixie cron's "starts with *"
  EXPECT_TRUE(Cron("0 0 1-31 * *").days_restricted);
  EXPECT_FALSE(Cron("0 0 * * 1").days_restricted);
  EXPECT_TRUE(Cron("0 0 * * 1").weekdays_restricted);
  EXPECT_TRUE(Cron("0 0 * * */1").weekdays_restricted);
  EXPECT_FALSE(Cron("0 0 1 * *").weekdays_restricted);
}

TEST(ParseSchedule, AnyWhitespaceSeparatesFields) {
  const CronSpec c = Cron("  \t5\t 4  *\n* \r 1,2  \t");
  EXPECT_EQ(Members(c.minutes), (std::vector<int>{5}));
  EXPECT_EQ(Members(c.hours), (std::vector<int>{4}));
  EXPECT_EQ(Members(c.weekdays), (std::vector<int>{1, 2}));
}

TEST(ParseSchedule, LeadingZerosAndDuplicatesAreFine) {
  EXPECT_EQ(Members(Cron("007 00 01 001 0 ").minutes), (std::vector<int>{7}));
  EXPECT_EQ(Members(Cron("5,5,1-6 * * * *").minutes), Range(1, 6));
}

TEST(ParseSchedule, Macros) {
  struct Case {
    const char* macro;
    const char* same_as;
  };
  for (const Case& m :
       {Case{"@hourly", "0 * * * *"}, Case{"@daily", "0 0 * * *"}, Case{"@midnight", "0 0 * * *"},
        Case{"@weekly", "0 0 * * 0"}, Case{"@monthly", "0 0 1 * *"}, Case{"@yearly", "0 0 1 1 *"},
        Case{"@annually", "0 0 1 1 *"}, Case{"  @DAILY ", "0 0 * * *"},
        Case{"@Weekly", "0 0 * * 0"}}) {
    const CronSpec a = Cron(m.macro);
    const CronSpec b = Cron(m.same_as);
    EXPECT_EQ(a.minutes, b.minutes) << m.macro;
    EXPECT_EQ(a.hours, b.hours) << m.macro;
    EXPECT_EQ(a.days, b.days) << m.macro;
    EXPECT_EQ(a.months, b.months) << m.macro;
    EXPECT_EQ(a.weekdays, b.weekdays) << m.macro;
    EXPECT_EQ(a.days_restricted, b.days_restricted) << m.macro;
    EXPECT_EQ(a.weekdays_restricted, b.weekdays_restricted) << m.macro;
  }
  const CronSpec weekly = Cron("@weekly");
  EXPECT_FALSE(weekly.days_restricted);
  EXPECT_TRUE(weekly.weekdays_restricted);
  EXPECT_EQ(Members(weekly.weekdays), (std::vector<int>{0}));
}

TEST(ParseSchedule, EveryKeepsTheTrimmedIntervalText) {
  ScheduleSpec parsed;
  std::string error;
  ASSERT_TRUE(ParseSchedule("  @every   1 hour 30 minutes \t", &parsed, &error)) << error;
  EXPECT_EQ(parsed.kind, ScheduleSpec::Kind::kEvery);
  EXPECT_EQ(parsed.every, "1 hour 30 minutes");
  ASSERT_TRUE(ParseSchedule("@EVERY\t5m", &parsed, &error)) << error;
  EXPECT_EQ(parsed.kind, ScheduleSpec::Kind::kEvery);
  EXPECT_EQ(parsed.every, "5m");
  // Parsing a cron spec into the same object resets it.
  ASSERT_TRUE(ParseSchedule("@daily", &parsed, &error)) << error;
  EXPECT_EQ(parsed.kind, ScheduleSpec::Kind::kCron);
  EXPECT_EQ(parsed.every, "");
}

TEST(ParseSchedule, SpecLevelErrors) {
  EXPECT_EQ(ErrorOf(""), "schedule spec is empty");
  EXPECT_EQ(ErrorOf(" \t\n"), "schedule spec is empty");
  EXPECT_EQ(ErrorOf("* * * *"),
            "cron spec \"* * * *\" has 4 fields: expected 5 (minute hour day-of-month month "
            "day-of-week)");
  EXPECT_EQ(ErrorOf(" 0 0 * * * * "),
            "cron spec \"0 0 * * * *\" has 6 fields: expected 5 (minute hour day-of-month month "
            "day-of-week)");
  EXPECT_EQ(ErrorOf("5"),
            "cron spec \"5\" has 1 field: expected 5 (minute hour day-of-month month "
            "day-of-week)");
  EXPECT_EQ(ErrorOf("@fortnightly"),
            "unknown schedule macro \"@fortnightly\": expected @hourly, @daily, @weekly, "
            "@monthly, @yearly or @every <interval>");
  EXPECT_EQ(ErrorOf("@"),
            "unknown schedule macro \"@\": expected @hourly, @daily, @weekly, @monthly, @yearly "
            "or @every <interval>");
  EXPECT_EQ(ErrorOf("@every5m"),
            "unknown schedule macro \"@every5m\": expected @hourly, @daily, @weekly, @monthly, "
            "@yearly or @every <interval>");
  EXPECT_EQ(ErrorOf("@daily 5"), "schedule macro \"@daily\" takes no argument");
  EXPECT_EQ(ErrorOf("@every"), "\"@every\" needs an interval, e.g. \"@every 5 minutes\"");
  EXPECT_EQ(ErrorOf("@every  \t "), "\"@every\" needs an interval, e.g. \"@every 5 minutes\"");
}

TEST(ParseSchedule, OutOfRangeValues) {
  EXPECT_EQ(ErrorOf("61 * * * *"), "invalid minute field \"61\" in cron spec: must be 0 to 59");
  EXPECT_EQ(ErrorOf("60 * * * *"), "invalid minute field \"60\" in cron spec: must be 0 to 59");
  EXPECT_EQ(ErrorOf("1,99999999999999999999 * * * *"),
            "invalid minute field \"1,99999999999999999999\" in cron spec: must be 0 to 59");
  EXPECT_EQ(ErrorOf("0 24 * * *"), "invalid hour field \"24\" in cron spec: must be 0 to 23");
  EXPECT_EQ(ErrorOf("0 0 0 * *"), "invalid day-of-month field \"0\" in cron spec: must be 1 to 31");
  EXPECT_EQ(ErrorOf("0 0 1-32 * *"),
            "invalid day-of-month field \"1-32\" in cron spec: must be 1 to 31");
  EXPECT_EQ(ErrorOf("0 0 * 13 *"),
            "invalid month field \"13\" in cron spec: must be 1 to 12 or JAN to DEC");
  EXPECT_EQ(ErrorOf("0 0 * 0 *"),
            "invalid month field \"0\" in cron spec: must be 1 to 12 or JAN to DEC");
  EXPECT_EQ(ErrorOf("0 0 * * 8"),
            "invalid day-of-week field \"8\" in cron spec: must be 0 to 7 or SUN to SAT");
}

TEST(ParseSchedule, ReversedRangesAndBadSteps) {
  EXPECT_EQ(ErrorOf("0 5-2 * * *"),
            "invalid hour field \"5-2\" in cron spec: reversed range \"5-2\"");
  EXPECT_EQ(ErrorOf("0 0 * * 1,FRI-MON/2"),
            "invalid day-of-week field \"1,FRI-MON/2\" in cron spec: reversed range \"FRI-MON\"");
  EXPECT_EQ(ErrorOf("0 0 * * SAT-SUN"),
            "invalid day-of-week field \"SAT-SUN\" in cron spec: reversed range \"SAT-SUN\"");
  EXPECT_EQ(ErrorOf("*/0 * * * *"),
            "invalid minute field \"*/0\" in cron spec: step must be 1 to 59");
  EXPECT_EQ(ErrorOf("0 1-10/0 * * *"),
            "invalid hour field \"1-10/0\" in cron spec: step must be 1 to 23");
  EXPECT_EQ(ErrorOf("0 */24 * * *"),
            "invalid hour field \"*/24\" in cron spec: step must be 1 to 23");
  EXPECT_EQ(ErrorOf("0 0 * */13 *"),
            "invalid month field \"*/13\" in cron spec: step must be 1 to 12");
  EXPECT_EQ(ErrorOf("0 0 * * */8"),
            "invalid day-of-week field \"*/8\" in cron spec: step must be 1 to 7");
  EXPECT_EQ(ErrorOf("*/ * * * *"), "invalid minute field \"*/\" in cron spec: a value is missing");
  EXPECT_EQ(ErrorOf("*/x * * * *"),
            "invalid minute field \"*/x\" in cron spec: unexpected character \"x\"");
  EXPECT_EQ(ErrorOf("1/2/3 * * * *"),
            "invalid minute field \"1/2/3\" in cron spec: unexpected character \"/\"");
}

TEST(ParseSchedule, MissingValuesAndEmptyElements) {
  EXPECT_EQ(ErrorOf("1- * * * *"), "invalid minute field \"1-\" in cron spec: a value is missing");
  EXPECT_EQ(ErrorOf("-3 * * * *"), "invalid minute field \"-3\" in cron spec: a value is missing");
  EXPECT_EQ(ErrorOf("/5 * * * *"), "invalid minute field \"/5\" in cron spec: a value is missing");
  EXPECT_EQ(ErrorOf("1-/5 * * * *"),
            "invalid minute field \"1-/5\" in cron spec: a value is missing");
  EXPECT_EQ(ErrorOf("1,,2 * * * *"),
            "invalid minute field \"1,,2\" in cron spec: empty list element");
  EXPECT_EQ(ErrorOf("1, * * * *"), "invalid minute field \"1,\" in cron spec: empty list element");
  EXPECT_EQ(ErrorOf(",1 * * * *"), "invalid minute field \",1\" in cron spec: empty list element");
}

TEST(ParseSchedule, GarbageCharactersAndUnknownNames) {
  EXPECT_EQ(ErrorOf("1x * * * *"),
            "invalid minute field \"1x\" in cron spec: unexpected character \"x\"");
  EXPECT_EQ(ErrorOf("** * * * *"),
            "invalid minute field \"**\" in cron spec: unexpected character \"*\"");
  EXPECT_EQ(ErrorOf("*-5 * * * *"),
            "invalid minute field \"*-5\" in cron spec: unexpected character \"-\"");
  EXPECT_EQ(ErrorOf("0 ? * * *"),
            "invalid hour field \"?\" in cron spec: unexpected character \"?\"");
  EXPECT_EQ(ErrorOf("0 +1 * * *"),
            "invalid hour field \"+1\" in cron spec: unexpected character \"+\"");
  EXPECT_EQ(ErrorOf("0 0 L * *"),
            "invalid day-of-month field \"L\" in cron spec: \"L\" is not a number");
  EXPECT_EQ(ErrorOf("abc * * * *"),
            "invalid minute field \"abc\" in cron spec: \"abc\" is not a number");
  EXPECT_EQ(ErrorOf("0 0 * JANUARY *"),
            "invalid month field \"JANUARY\" in cron spec: unknown month name \"JANUARY\"");
  EXPECT_EQ(ErrorOf("0 0 * MON *"),
            "invalid month field \"MON\" in cron spec: unknown month name \"MON\"");
  EXPECT_EQ(ErrorOf("0 0 * * JAN"),
            "invalid day-of-week field \"JAN\" in cron spec: unknown day-of-week name \"JAN\"");
  EXPECT_EQ(ErrorOf("0 0 * * M0N"),
            "invalid day-of-week field \"M0N\" in cron spec: unknown day-of-week name \"M\"");
  EXPECT_EQ(ErrorOf("0 0 * * 1\x01"),
            "invalid day-of-week field \"1\x01\" in cron spec: unexpected non-ASCII or control "
            "character");
  EXPECT_EQ(ErrorOf("0 0 * * 1\xc3\xa9"),
            "invalid day-of-week field \"1\xc3\xa9\" in cron spec: unexpected non-ASCII or "
            "control character");
}

TEST(ParseSchedule, TheFirstBadFieldIsReported) {
  EXPECT_EQ(ErrorOf("99 99 * * *"), "invalid minute field \"99\" in cron spec: must be 0 to 59");
}

TEST(ParseSchedule, FailureLeavesTheOutputAloneAndToleratesANullError) {
  ScheduleSpec parsed;
  parsed.kind = ScheduleSpec::Kind::kEvery;
  parsed.every = "1 hour";
  EXPECT_FALSE(ParseSchedule("61 * * * *", &parsed, nullptr));
  EXPECT_FALSE(ParseSchedule("", &parsed, nullptr));
  EXPECT_EQ(parsed.kind, ScheduleSpec::Kind::kEvery);
  EXPECT_EQ(parsed.every, "1 hour");
  EXPECT_TRUE(ParseSchedule("@hourly", &parsed, nullptr));
  EXPECT_EQ(parsed.kind, ScheduleSpec::Kind::kCron);
}

}  // namespace
}  // namespace pgq::core::cron_test
