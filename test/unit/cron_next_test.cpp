// NextCronFire: the next slot in UTC and fixed offsets, and around real DST
// transitions (glibc's tzdata), checked against a minute-by-minute reference.
#include "core/cron.h"
#include "cron_test_support.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <string>
#include <vector>

namespace pgq::core::cron_test {
namespace {

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
}  // namespace pgq::core::cron_test
