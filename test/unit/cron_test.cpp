#include "core/cron.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <string>
#include <vector>

namespace pgq::core {
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

CronSpec Cron(const std::string& spec) {
  ScheduleSpec parsed;
  std::string error;
  EXPECT_TRUE(ParseSchedule(spec, &parsed, &error)) << spec << ": " << error;
  EXPECT_EQ(parsed.kind, ScheduleSpec::Kind::kCron) << spec;
  return parsed.cron;
}

// The message ParseSchedule gives for `spec`, which must be rejected.
std::string ErrorOf(const std::string& spec) {
  ScheduleSpec parsed;
  std::string error;
  EXPECT_FALSE(ParseSchedule(spec, &parsed, &error)) << spec;
  return error;
}

// UTC seconds of a UTC civil time, by glibc (independent of the code under test).
int64_t Utc(int year, int month, int day, int hour = 0, int minute = 0, int second = 0) {
  std::tm tm{};
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = second;
  return static_cast<int64_t>(timegm(&tm));
}

class FixedZone : public ZoneOffsets {
 public:
  explicit FixedZone(int32_t offset) : offset_(offset) {}
  int32_t OffsetAt(int64_t) const override {
    ++calls;
    return offset_;
  }
  mutable int calls = 0;

 private:
  int32_t offset_;
};

// One transition at `at` (any second, not only whole minutes) from `before` to `after`.
class OneTransitionZone : public ZoneOffsets {
 public:
  OneTransitionZone(int64_t at, int32_t before, int32_t after)
      : at_(at), before_(before), after_(after) {}
  int32_t OffsetAt(int64_t utc) const override { return utc < at_ ? before_ : after_; }

 private:
  int64_t at_;
  int32_t before_;
  int32_t after_;
};

// A real zone through glibc: TZ is set while the object lives, then restored.
class GlibcZone : public ZoneOffsets {
 public:
  explicit GlibcZone(const char* name) {
    if (const char* old = std::getenv("TZ")) saved_ = old;
    setenv("TZ", name, 1);
    tzset();
  }
  ~GlibcZone() override {
    if (saved_) {
      setenv("TZ", saved_->c_str(), 1);
    } else {
      unsetenv("TZ");
    }
    tzset();
  }
  GlibcZone(const GlibcZone&) = delete;
  GlibcZone& operator=(const GlibcZone&) = delete;

  int32_t OffsetAt(int64_t utc) const override {
    const std::time_t t = static_cast<std::time_t>(utc);
    std::tm tm{};
    localtime_r(&t, &tm);
    return static_cast<int32_t>(tm.tm_gmtoff);
  }

 private:
  std::optional<std::string> saved_;
};

const FixedZone kUtc(0);

int64_t Next(const std::string& spec, int64_t after, const ZoneOffsets& zone = kUtc) {
  return NextCronFire(Cron(spec), after, zone);
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

// ---------------------------------------------------------------------------
// Next fire in UTC

TEST(NextCronFire, EveryMinuteIsTheNextWholeMinute) {
  EXPECT_EQ(Next("* * * * *", Utc(2026, 5, 1, 10, 0)), Utc(2026, 5, 1, 10, 1));
  EXPECT_EQ(Next("* * * * *", Utc(2026, 5, 1, 10, 0, 1)), Utc(2026, 5, 1, 10, 1));
  EXPECT_EQ(Next("* * * * *", Utc(2026, 5, 1, 10, 0, 59)), Utc(2026, 5, 1, 10, 1));
  EXPECT_EQ(Next("* * * * *", Utc(2026, 12, 31, 23, 59, 30)), Utc(2027, 1, 1, 0, 0));
}

TEST(NextCronFire, EveryFifteenMinutes) {
  EXPECT_EQ(Next("*/15 * * * *", Utc(2026, 5, 1, 10, 7)), Utc(2026, 5, 1, 10, 15));
  EXPECT_EQ(Next("*/15 * * * *", Utc(2026, 5, 1, 10, 15)), Utc(2026, 5, 1, 10, 30));
  EXPECT_EQ(Next("*/15 * * * *", Utc(2026, 5, 1, 10, 45)), Utc(2026, 5, 1, 11, 0));
  EXPECT_EQ(Next("*/15 * * * *", Utc(2026, 5, 31, 23, 50)), Utc(2026, 6, 1, 0, 0));
}

TEST(NextCronFire, Hourly) {
  EXPECT_EQ(Next("@hourly", Utc(2026, 5, 1, 10, 0)), Utc(2026, 5, 1, 11, 0));
  EXPECT_EQ(Next("@hourly", Utc(2026, 5, 1, 10, 59, 59)), Utc(2026, 5, 1, 11, 0));
  EXPECT_EQ(Next("@hourly", Utc(2026, 5, 1, 9, 59, 59)), Utc(2026, 5, 1, 10, 0));
  EXPECT_EQ(Next("30 9-17 * * *", Utc(2026, 5, 1, 17, 30)), Utc(2026, 5, 2, 9, 30));
}

TEST(NextCronFire, Daily) {
  EXPECT_EQ(Next("30 4 * * *", Utc(2026, 5, 1, 4, 29)), Utc(2026, 5, 1, 4, 30));
  EXPECT_EQ(Next("30 4 * * *", Utc(2026, 5, 1, 4, 30)), Utc(2026, 5, 2, 4, 30));
  EXPECT_EQ(Next("@daily", Utc(2026, 2, 28, 12, 0)), Utc(2026, 3, 1, 0, 0));
  EXPECT_EQ(Next("@daily", Utc(2028, 2, 28, 12, 0)), Utc(2028, 2, 29, 0, 0));
}

TEST(NextCronFire, WeeklyOnNamedDays) {
  // 2026-01-01 is a Thursday.
  const std::string spec = "0 9 * * MON,FRI";
  int64_t t = Utc(2026, 1, 1, 0, 0);
  const std::vector<int64_t> expected = {Utc(2026, 1, 2, 9, 0), Utc(2026, 1, 5, 9, 0),
                                         Utc(2026, 1, 9, 9, 0), Utc(2026, 1, 12, 9, 0)};
  for (const int64_t e : expected) {
    t = Next(spec, t);
    EXPECT_EQ(t, e);
  }
  EXPECT_EQ(Next("@weekly", Utc(2026, 1, 1)), Utc(2026, 1, 4));       // Sunday
  EXPECT_EQ(Next("0 0 * * 7", Utc(2026, 1, 4)), Utc(2026, 1, 11));    // 7 is Sunday
  EXPECT_EQ(Next("0 0 * * SAT", Utc(2026, 1, 3)), Utc(2026, 1, 10));  // strictly after
  EXPECT_EQ(Next("0 8 * * MON-FRI", Utc(2026, 1, 2, 8, 0)), Utc(2026, 1, 5, 8, 0));
}

TEST(NextCronFire, MonthlyOnThe31stSkipsShortMonths) {
  int64_t t = Utc(2026, 1, 31);
  for (const int64_t e : {Utc(2026, 3, 31), Utc(2026, 5, 31), Utc(2026, 7, 31), Utc(2026, 8, 31),
                          Utc(2026, 10, 31), Utc(2026, 12, 31), Utc(2027, 1, 31)}) {
    t = Next("0 0 31 * *", t);
    EXPECT_EQ(t, e);
  }
  EXPECT_EQ(Next("@monthly", Utc(2026, 1, 15)), Utc(2026, 2, 1));
  EXPECT_EQ(Next("0 0 1 JAN,JUL *", Utc(2026, 1, 1)), Utc(2026, 7, 1));
  EXPECT_EQ(Next("@yearly", Utc(2026, 1, 1)), Utc(2027, 1, 1));
}

TEST(NextCronFire, February29thOnlyInLeapYears) {
  EXPECT_EQ(Next("0 0 29 2 *", Utc(2026, 1, 1)), Utc(2028, 2, 29));
  EXPECT_EQ(Next("0 0 29 2 *", Utc(2028, 2, 29)), Utc(2032, 2, 29));
  EXPECT_EQ(Next("0 0 29 2 *", Utc(2000, 1, 1)), Utc(2000, 2, 29));  // 2000 is a leap year
  // 2100 is not: eight years from 2096 to 2104, still within the horizon.
  EXPECT_EQ(Next("0 0 29 2 *", Utc(2096, 2, 29)), Utc(2104, 2, 29));
}

TEST(NextCronFire, SpecsThatNeverFire) {
  EXPECT_EQ(Next("0 0 30 2 *", Utc(2026, 1, 1)), kNeverFires);
  EXPECT_EQ(Next("0 0 31 2 *", Utc(2026, 1, 1)), kNeverFires);
  EXPECT_EQ(Next("0 0 31 4,6,9,11 *", Utc(2026, 1, 1)), kNeverFires);
  EXPECT_EQ(Next("0 0 31 4 *", Utc(2026, 1, 1)), kNeverFires);
  EXPECT_EQ(NextCronFire(CronSpec{}, Utc(2026, 1, 1), kUtc), kNeverFires);  // empty sets
}

TEST(NextCronFire, DayOfMonthOrDayOfWeekWhenBothAreRestricted) {
  // Friday the 13th rule: every 13th and every Friday. 2026-01-02 and -09 are Fridays.
  const std::string spec = "0 0 13 * FRI";
  int64_t t = Utc(2026, 1, 1);
  for (const int64_t e : {Utc(2026, 1, 2), Utc(2026, 1, 9), Utc(2026, 1, 13), Utc(2026, 1, 16)}) {
    t = Next(spec, t);
    EXPECT_EQ(t, e);
  }
  // A day-of-month that never exists does not stop the weekday: first Sunday of Feb 2026.
  EXPECT_EQ(Next("0 0 30 2 SUN", Utc(2026, 1, 1)), Utc(2026, 2, 1));
  // "*/2" counts as restricted: odd days or Mondays. 2026-01-12 is a Monday.
  t = Utc(2026, 1, 9);
  for (const int64_t e : {Utc(2026, 1, 11), Utc(2026, 1, 12), Utc(2026, 1, 13)}) {
    t = Next("0 0 */2 * MON", t);
    EXPECT_EQ(t, e);
  }
  // "1-31" is restricted too, so with a weekday it matches every day.
  EXPECT_EQ(Next("0 0 1-31 * MON", Utc(2026, 1, 1)), Utc(2026, 1, 2));
}

TEST(NextCronFire, DayOfMonthAndDayOfWeekWhenOnlyOneIsRestricted) {
  EXPECT_EQ(Next("0 0 * * FRI", Utc(2026, 1, 2)), Utc(2026, 1, 9));
  EXPECT_EQ(Next("0 0 13 * *", Utc(2026, 1, 2)), Utc(2026, 1, 13));
  // Both '*' with only the month restricted.
  EXPECT_EQ(Next("0 0 * 3 *", Utc(2026, 1, 2)), Utc(2026, 3, 1));
}

TEST(NextCronFire, FixedOffsetZones) {
  const FixedZone india(5 * 3600 + 1800);
  EXPECT_EQ(Next("0 9 * * *", Utc(2026, 1, 1, 0, 0), india), Utc(2026, 1, 1, 3, 30));
  EXPECT_EQ(Next("0 9 * * *", Utc(2026, 1, 1, 3, 30), india), Utc(2026, 1, 2, 3, 30));
  const FixedZone new_york_winter(-5 * 3600);
  // 2026-01-01 22:00 in New York is 2026-01-02 03:00 UTC.
  EXPECT_EQ(Next("0 22 1 * *", Utc(2026, 1, 1, 12, 0), new_york_winter), Utc(2026, 1, 2, 3, 0));
  // Local day-of-week: Friday 2026-01-02 00:30 in +05:30 is Thursday 19:00 UTC.
  EXPECT_EQ(Next("30 0 * * FRI", Utc(2026, 1, 1), india), Utc(2026, 1, 1, 19, 0));
}

TEST(NextCronFire, BeforeTheEpoch) {
  EXPECT_EQ(Next("0 0 1 1 *", Utc(1969, 6, 1)), 0);
  EXPECT_EQ(Next("@daily", Utc(1900, 2, 28, 5, 0)), Utc(1900, 3, 1));  // 1900 is not leap
  EXPECT_EQ(Next("0 12 * * MON", Utc(1969, 12, 31)), Utc(1970, 1, 5, 12, 0));
}

TEST(NextCronFire, OutsideTheSupportedRangeNeverFires) {
  EXPECT_EQ(Next("* * * * *", INT64_MAX), kNeverFires);
  EXPECT_EQ(Next("* * * * *", INT64_MIN), kNeverFires);
  EXPECT_EQ(Next("* * * * *", int64_t{1} << 41), kNeverFires);
  EXPECT_NE(Next("* * * * *", int64_t{1} << 39), kNeverFires);
}

TEST(NextCronFire, SkipsWholeMonthsAndDaysInsteadOfTryingEachMinute) {
  // Each slot tried costs a few OffsetAt calls; years without a slot cost none.
  const FixedZone counting(0);
  EXPECT_EQ(NextCronFire(Cron("@yearly"), Utc(2026, 1, 1), counting), Utc(2027, 1, 1));
  EXPECT_LE(counting.calls, 5);
  counting.calls = 0;
  EXPECT_EQ(NextCronFire(Cron("0 0 30 2 *"), Utc(2026, 1, 1), counting), kNeverFires);
  EXPECT_LE(counting.calls, 1);
}

TEST(NextCronFire, GapTransitionIsFoundToTheSecond) {
  // A synthetic zone jumping from +00:00 to +01:00 at an instant that is not a whole minute.
  const int64_t at = Utc(2026, 6, 1, 2, 0, 17);
  const OneTransitionZone zone(at, 0, 3600);
  // Local 02:30 does not exist (02:00:17 -> 03:00:17).
  EXPECT_EQ(Next("30 2 * * *", Utc(2026, 6, 1, 1, 0), zone), at);
  // Local 03:00:00 is in the gap too (local time resumes at 03:00:17): it fires at the
  // transition; 03:01 exists.
  EXPECT_EQ(Next("0 3 * * *", Utc(2026, 6, 1, 1, 0), zone), at);
  EXPECT_EQ(Next("1 3 * * *", Utc(2026, 6, 1, 1, 0), zone), Utc(2026, 6, 1, 2, 1));
  // West of Greenwich, from -05:00 to -04:00 at 07:00 UTC (02:00 -> 03:00 local).
  const OneTransitionZone west(Utc(2026, 3, 8, 7, 0), -5 * 3600, -4 * 3600);
  EXPECT_EQ(Next("30 2 * * *", Utc(2026, 3, 7, 12, 0), west), Utc(2026, 3, 8, 7, 0));
  EXPECT_EQ(Next("30 2 * * *", Utc(2026, 3, 8, 7, 0), west), Utc(2026, 3, 9, 6, 30));
}

// ---------------------------------------------------------------------------
// Real zones (glibc's tzdata). Expected instants were derived with
// `zdump -v <zone> | grep 2026` and `date -u -d '<UTC time>' +%s`.

class RealZone : public ::testing::Test {
 protected:
  // Checks that tzdata is there: without it glibc silently uses UTC.
  static void ExpectOffsets(const GlibcZone& zone, int32_t january, int32_t july) {
    ASSERT_EQ(zone.OffsetAt(Utc(2026, 1, 15)), january) << "is tzdata installed?";
    ASSERT_EQ(zone.OffsetAt(Utc(2026, 7, 15)), july) << "is tzdata installed?";
  }
};

// Europe/Madrid, 2026-03-29: 01:00:00 UTC, local 02:00 CET (+01) -> 03:00 CEST (+02).
constexpr int64_t kMadridSpring = 1774746000;  // 2026-03-29 01:00 UTC = 03:00 CEST
// Europe/Madrid, 2026-10-25: 01:00:00 UTC, local 03:00 CEST (+02) -> 02:00 CET (+01).
constexpr int64_t kMadridFall = 1792890000;  // 2026-10-25 01:00 UTC = the second 02:00 (CET)

TEST_F(RealZone, MadridSpringForwardSlotInTheGapFiresAtTheTransitionOnce) {
  const GlibcZone madrid("Europe/Madrid");
  ExpectOffsets(madrid, 3600, 7200);
  // after 2026-03-28 02:30 CET = 01:30 UTC (1774661400)
  EXPECT_EQ(Next("30 2 * * *", 1774661400, madrid), kMadridSpring);
  // then 2026-03-30 02:30 CEST = 00:30 UTC
  EXPECT_EQ(Next("30 2 * * *", kMadridSpring, madrid), 1774830600);

  // "*/15 2 * * *": all four slots of the missing hour fire once, together, at 03:00 CEST.
  // after 2026-03-28 02:45 CET = 01:45 UTC (1774662300)
  EXPECT_EQ(Next("*/15 2 * * *", 1774662300, madrid), kMadridSpring);
  // then 2026-03-30 02:00 CEST = 00:00 UTC
  EXPECT_EQ(Next("*/15 2 * * *", kMadridSpring, madrid), 1774828800);
}

TEST_F(RealZone, MadridSpringForwardAroundTheGap) {
  const GlibcZone madrid("Europe/Madrid");
  ExpectOffsets(madrid, 3600, 7200);
  // "*/15 * * * *" after 01:45 CET (00:45 UTC, 1774745100): 02:00 is missing -> 03:00 CEST,
  // then 03:15 CEST = 01:15 UTC (1774746900).
  EXPECT_EQ(Next("*/15 * * * *", 1774745100, madrid), kMadridSpring);
  EXPECT_EQ(Next("*/15 * * * *", kMadridSpring, madrid), 1774746900);
  // Hourly after 01:00 CET (00:00 UTC, 1774742400): 02:00 fires at 03:00 CEST, then
  // 04:00 CEST = 02:00 UTC (1774749600): no real hour without a run.
  EXPECT_EQ(Next("0 * * * *", 1774742400, madrid), kMadridSpring);
  EXPECT_EQ(Next("0 * * * *", kMadridSpring, madrid), 1774749600);
  // A slot at 03:00 exists and is the transition instant itself.
  // after 2026-03-28 03:00 CET = 02:00 UTC (1774663200)
  EXPECT_EQ(Next("0 3 * * *", 1774663200, madrid), kMadridSpring);
  // Slots 02:00, 02:30 and 03:00 coalesce at the transition; next is 03:30 CEST = 01:30 UTC.
  EXPECT_EQ(Next("0,30 2,3 * * *", 1774742400, madrid), kMadridSpring);
  EXPECT_EQ(Next("0,30 2,3 * * *", kMadridSpring, madrid), 1774747800);
}

TEST_F(RealZone, MadridFallBackRepeatedSlotFiresOnceAtItsFirstOccurrence) {
  const GlibcZone madrid("Europe/Madrid");
  ExpectOffsets(madrid, 3600, 7200);
  // after 2026-10-24 02:30 CEST = 00:30 UTC (1792801800)
  // -> 2026-10-25 02:30 CEST (first) = 00:30 UTC (1792888200)
  EXPECT_EQ(Next("30 2 * * *", 1792801800, madrid), 1792888200);
  // -> 2026-10-26 02:30 CET = 01:30 UTC (1792978200), not the second 02:30 at 01:30 UTC today
  EXPECT_EQ(Next("30 2 * * *", 1792888200, madrid), 1792978200);
}

TEST_F(RealZone, MadridFallBackHourlySkipsTheRepeatedHour) {
  const GlibcZone madrid("Europe/Madrid");
  ExpectOffsets(madrid, 3600, 7200);
  // after 01:00 CEST = 2026-10-24 23:00 UTC (1792882800)
  // -> 02:00 CEST (first) = 00:00 UTC (1792886400)
  EXPECT_EQ(Next("0 * * * *", 1792882800, madrid), 1792886400);
  // -> 03:00 CET = 02:00 UTC (1792893600): the second 02:00 (kMadridFall) does not fire,
  // so two real hours pass between these runs.
  EXPECT_EQ(Next("0 * * * *", 1792886400, madrid), 1792893600);
  // "*/15" after the first 02:45 (00:45 UTC, 1792889100) -> 03:00 CET.
  EXPECT_EQ(Next("*/15 * * * *", 1792889100, madrid), 1792893600);
}

TEST_F(RealZone, MadridFallBackScheduleCreatedInTheRepeatedHour) {
  const GlibcZone madrid("Europe/Madrid");
  ExpectOffsets(madrid, 3600, 7200);
  // after the second 02:10 (CET) = 01:10 UTC (1792890600): the first 02:30 is past, the second
  // 02:30 = 01:30 UTC (1792891800) is returned.
  EXPECT_EQ(Next("30 2 * * *", 1792890600, madrid), 1792891800);
  // after the first 02:45 (CEST) = 00:45 UTC (1792889100): 02:30 has fired, the next local
  // 02:30 is tomorrow's.
  EXPECT_EQ(Next("30 2 * * *", 1792889100, madrid), 1792978200);
  // Hourly created at the second 02:10: next is 03:00 CET.
  EXPECT_EQ(Next("0 * * * *", 1792890600, madrid), 1792893600);
  // Created at the very instant the clock goes back (second 02:00:00): 02:00 is not after it.
  EXPECT_EQ(Next("0 2 * * *", kMadridFall, madrid), Utc(2026, 10, 26, 1, 0));
}

// America/Santiago changes at local midnight:
//   2026-04-05 03:00:00 UTC: Sat Apr 4 23:59:59 -03 -> Sat Apr 4 23:00:00 -04 (fall back)
//   2026-09-06 04:00:00 UTC: Sat Sep 5 23:59:59 -04 -> Sun Sep 6 01:00:00 -03 (spring forward)
TEST_F(RealZone, SantiagoMidnightThatDoesNotExistFiresAtOneAm) {
  const GlibcZone santiago("America/Santiago");
  ExpectOffsets(santiago, -3 * 3600, -4 * 3600);
  // after 2026-09-05 00:00 -04 = 04:00 UTC (1788580800)
  // -> 2026-09-06 01:00 -03 = 04:00 UTC (1788667200)
  EXPECT_EQ(Next("0 0 * * *", 1788580800, santiago), 1788667200);
  // -> 2026-09-07 00:00 -03 = 03:00 UTC (1788750000)
  EXPECT_EQ(Next("0 0 * * *", 1788667200, santiago), 1788750000);
  // The macro and a weekday spec for Sunday behave the same (Sep 6 is a Sunday).
  EXPECT_EQ(Next("@daily", 1788580800, santiago), 1788667200);
  EXPECT_EQ(Next("0 0 * * SUN", 1788580800, santiago), 1788667200);
}

TEST_F(RealZone, SantiagoFallBackAtMidnight) {
  const GlibcZone santiago("America/Santiago");
  ExpectOffsets(santiago, -3 * 3600, -4 * 3600);
  // Midnight of Apr 5 exists once: after 2026-04-04 00:00 -03 = 03:00 UTC (1775271600)
  // -> 2026-04-05 00:00 -04 = 04:00 UTC (1775361600)
  EXPECT_EQ(Next("0 0 * * *", 1775271600, santiago), 1775361600);
  // -> 2026-04-06 00:00 -04 = 04:00 UTC (1775448000)
  EXPECT_EQ(Next("0 0 * * *", 1775361600, santiago), 1775448000);
  // 23:30 on Apr 4 happens twice; it fires at the first, 23:30 -03 = Apr 5 02:30 UTC
  // (1775356200), after 2026-04-03 23:30 -03 = Apr 4 02:30 UTC (1775269800).
  EXPECT_EQ(Next("30 23 * * *", 1775269800, santiago), 1775356200);
  // then 2026-04-05 23:30 -04 = Apr 6 03:30 UTC (1775446200)
  EXPECT_EQ(Next("30 23 * * *", 1775356200, santiago), 1775446200);
}

// An independent statement of the rule, checked by brute force: walking real time minute by
// minute, a slot fires at the first instant the local clock reaches or passes it for the first
// time since `after` (a high-water mark of local time). A jump forward passes every slot in
// the gap at once; a jump back does not lower the mark, so repeated slots do not fire again.
std::vector<int64_t> ReferenceFires(const CronSpec& cron, int64_t after, int64_t until,
                                    const ZoneOffsets& zone, std::size_t max_fires = SIZE_MAX) {
  auto matches = [&cron](int64_t local) {
    const std::time_t t = static_cast<std::time_t>(local);
    std::tm tm{};
    gmtime_r(&t, &tm);
    const bool dom = cron.days[tm.tm_mday];
    const bool dow = cron.weekdays[tm.tm_wday];
    const bool day = cron.days_restricted && cron.weekdays_restricted ? dom || dow : dom && dow;
    return cron.minutes[tm.tm_min] && cron.hours[tm.tm_hour] && cron.months[tm.tm_mon + 1] && day;
  };
  std::vector<int64_t> fires;
  int64_t mark = after + zone.OffsetAt(after);
  for (int64_t u = (after / 60 + 1) * 60; u <= until && fires.size() < max_fires; u += 60) {
    const int64_t local = u + zone.OffsetAt(u);
    bool fire = false;
    for (int64_t slot = (mark / 60 + 1) * 60; slot <= local && !fire; slot += 60) {
      fire = matches(slot);
    }
    if (fire) fires.push_back(u);
    mark = std::max(mark, local);
  }
  return fires;
}

TEST_F(RealZone, AgreesWithMinuteByMinuteReferenceAroundEveryTransition) {
  const char* const specs[] = {"* * * * *",    "*/15 * * * *",   "0 * * * *",   "30 2 * * *",
                               "*/15 2 * * *", "0,30 2,3 * * *", "0 0 * * *",   "30 23 * * *",
                               "59 1 * * *",   "0 3 * * *",      "0 0 * * SUN", "5 0,1 * * *"};
  struct Window {
    const char* zone;
    int64_t transition;
  };
  // From `zdump -v <zone> | grep 2026`.
  for (const Window w :
       {Window{"Europe/Madrid", 1774746000}, Window{"Europe/Madrid", 1792890000},
        Window{"America/Santiago", 1775358000}, Window{"America/Santiago", 1788667200}}) {
    const GlibcZone zone(w.zone);
    const int64_t from = w.transition - 36 * 3600;
    const int64_t until = w.transition + 36 * 3600;
    for (const char* spec : specs) {
      const CronSpec cron = Cron(spec);
      // The chain of fires from one start, as a scheduler would follow it.
      std::vector<int64_t> chain;
      for (int64_t t = NextCronFire(cron, from, zone); t <= until;
           t = NextCronFire(cron, t, zone)) {
        chain.push_back(t);
      }
      EXPECT_EQ(chain, ReferenceFires(cron, from, until, zone)) << w.zone << " " << spec;
      // Single steps from many starts (not on minute boundaries), including inside the gap's
      // and the overlap's neighbourhood.
      for (int64_t after = w.transition - 3 * 3600 + 17; after < w.transition + 3 * 3600;
           after += 7 * 60 + 13) {
        const std::vector<int64_t> expected =
            ReferenceFires(cron, after, after + 8 * 86400, zone, 1);
        ASSERT_EQ(expected.size(), 1u) << spec;
        EXPECT_EQ(NextCronFire(cron, after, zone), expected.front())
            << w.zone << " " << spec << " after " << after;
      }
    }
  }
}

TEST(GlibcZone, RestoresTz) {
  const char* original = std::getenv("TZ");
  const std::optional<std::string> saved =
      original != nullptr ? std::optional<std::string>(original) : std::nullopt;
  setenv("TZ", "Asia/Tokyo", 1);
  tzset();
  { const GlibcZone madrid("Europe/Madrid"); }
  EXPECT_STREQ(std::getenv("TZ"), "Asia/Tokyo");
  unsetenv("TZ");
  tzset();
  { const GlibcZone madrid("Europe/Madrid"); }
  EXPECT_EQ(std::getenv("TZ"), nullptr);
  if (saved) setenv("TZ", saved->c_str(), 1);
  tzset();
}

}  // namespace
}  // namespace pgq::core
