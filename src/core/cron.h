// Recurring-job schedules (pgq.schedule's `spec`): parsing, and the next slot
// of a cron spec in a time zone. Pure C++: no PostgreSQL headers.
//
// Grammar of `spec` (leading and trailing whitespace ignored):
//  - a cron expression of exactly 5 whitespace-separated fields,
//      minute (0-59)  hour (0-23)  day-of-month (1-31)  month (1-12)  day-of-week (0-7)
//    each a comma-separated list of elements:
//      *        every value of the field
//      a        one value
//      a-b      a to b inclusive (a <= b; no wrap-around)
//      */n      every n-th value from the field's minimum
//      a-b/n    every n-th value from a to b
//      a/n      every n-th value from a to the field's maximum
//    ("*" and "a/n" end at 6, Saturday, in day-of-week: "1/2" is MON,WED,FRI)
//    Month names JAN-DEC and day-of-week names SUN-SAT (three letters, any
//    case) may stand for numbers, also in ranges ("MON-FRI"). Day-of-week 7
//    is Sunday, like 0, so "5-7" is Friday to Sunday. A step n is 1 to the
//    field's maximum (59, 23, 31, 12, 7).
//  - a macro (any case): @hourly = "0 * * * *", @daily and @midnight =
//    "0 0 * * *", @weekly = "0 0 * * 0", @monthly = "0 0 1 * *", @yearly and
//    @annually = "0 0 1 1 *". A macro takes no argument.
//  - "@every <interval>": kind kEvery; `every` is the rest of the text,
//    trimmed, which must not be empty. This file does not interpret it.
//
// Day matching (Vixie cron): when both day-of-month and day-of-week are
// restricted, a day matches if EITHER matches ("0 0 13 * FRI" fires on every
// 13th and on every Friday); otherwise both must match, '*' matching every
// day. A field is restricted when its text is anything but a lone "*". Unlike
// Vixie cron, which treats any field starting with '*' as unrestricted,
// "*/2" counts as restricted here: it names a subset of days.
#pragma once

#include <bitset>
#include <cstdint>
#include <string>
#include <string_view>

namespace pgq::core {

// A parsed 5-field cron expression: minute hour day-of-month month day-of-week.
struct CronSpec {
  std::bitset<60> minutes;           // 0-59
  std::bitset<24> hours;             // 0-23
  std::bitset<32> days;              // 1-31 (bit 0 unused)
  std::bitset<13> months;            // 1-12 (bit 0 unused)
  std::bitset<7> weekdays;           // 0 = Sunday .. 6 = Saturday
  bool days_restricted = false;      // day-of-month field was not '*'
  bool weekdays_restricted = false;  // day-of-week field was not '*'
};

struct ScheduleSpec {
  enum class Kind { kCron, kEvery };
  Kind kind = Kind::kCron;
  CronSpec cron;      // kCron
  std::string every;  // kEvery: the interval text after "@every", trimmed (the PostgreSQL side
                      // parses it)
};

// Parses `spec`. On error returns false and sets *error to a message in PostgreSQL style
// (lower case, no trailing period), e.g. "invalid minute field \"61\" in cron spec: must be 0 to
// 59". *out is written only on success; `error` may be null.
//
// The messages:
//   schedule spec is empty
//   unknown schedule macro "@x": expected @hourly, @daily, @weekly, @monthly, @yearly or
//     @every <interval>
//   schedule macro "@daily" takes no argument
//   "@every" needs an interval, e.g. "@every 5 minutes"
//   cron spec "<spec>" has N field(s): expected 5 (minute hour day-of-month month day-of-week)
//   invalid <field> field "<text>" in cron spec: <reason>, where <field> is minute, hour,
//   day-of-month, month or day-of-week and <reason> one of
//     must be 0 to 59                 (a value out of range; for months "must be 1 to 12 or JAN
//                                      to DEC", for days of the week "must be 0 to 7 or SUN to
//                                      SAT")
//     step must be 1 to 59            (the field's maximum)
//     reversed range "5-2"
//     empty list element
//     a value is missing              ("1-", "/5", "-3")
//     "abc" is not a number           (letters where no names are allowed)
//     unknown month name "abc"        (or "unknown day-of-week name")
//     unexpected character "x"        (or "unexpected non-ASCII or control character")
bool ParseSchedule(std::string_view spec, ScheduleSpec* out, std::string* error);

// A time zone, as seconds east of UTC at a given UTC instant (the PostgreSQL side implements
// it with pg_localtime; tests with glibc's localtime_r under TZ=...).
class ZoneOffsets {
 public:
  virtual ~ZoneOffsets() = default;
  virtual int32_t OffsetAt(int64_t utc_seconds) const = 0;
};

inline constexpr int64_t kNeverFires = INT64_MAX;

// The first slot of `cron` strictly after `after_utc` (seconds since the Unix epoch, UTC),
// in the wall-clock time of `zone`; kNeverFires if no slot exists within the next 8 years
// (e.g. "0 0 30 2 *").
//
// Slots are wall-clock minutes in `zone`. Precisely: for each local slot in ascending
// wall-clock order, starting with the first one after the local time of `after_utc`, the
// result is the earliest valid UTC instant of that slot that is > after_utc; the first slot
// that has one wins. Consequences at daylight-saving transitions:
//  - spring forward (a gap, e.g. Europe/Madrid 02:00 -> 03:00): a slot inside the gap does
//    not exist and fires at the transition instant (03:00 local). All slots in one gap, and a
//    slot at the transition's wall-clock time (03:00), fire together, once: the next search
//    starts after 03:00 local. "*/15 2 * * *" fires once that day, at 03:00.
//  - fall back (an overlap, e.g. 03:00 -> 02:00): a repeated slot fires once, at its first
//    occurrence; the next search starts after that wall-clock time, so the repetition is
//    skipped. Hourly "0 * * * *" therefore fires at the first 02:00 and next at 03:00, two
//    real hours later. Only when `after_utc` itself lies in the repeated hour (a schedule
//    created then, or the first occurrence already past) may a slot's second occurrence be
//    returned, for slots later than the local time of `after_utc`.
//
// Local times are converted to UTC through `zone.OffsetAt` alone: a slot L has the
// candidates L - OffsetAt(L - 1 day) and L - OffsetAt(L + 1 day), each valid when its own
// offset maps it back to L; when neither is valid the slot is in a gap whose transition is
// found by binary search between them. INVARIANT: the zone changes offset at most once within
// a day of any slot and offsets stay under a day (true of every real zone). A few OffsetAt
// calls per slot tried (about 20 for a slot in a gap); non-matching months, days and hours
// are skipped whole, so even a yearly spec costs one slot.
//
// "The next 8 years" is the local dates up to 8 * 366 days after the local date of
// `after_utc`: enough for Feb 29 across a non-leap century year (2096 -> 2104). An
// `after_utc` outside +-2^40 seconds (about +-34,800 years) gives kNeverFires.
int64_t NextCronFire(const CronSpec& cron, int64_t after_utc, const ZoneOffsets& zone);

}  // namespace pgq::core
