#include "core/cron.h"

#include <algorithm>
#include <array>
#include <initializer_list>
#include <utility>

namespace pgq::core {
namespace {

// ---------------------------------------------------------------------------
// Parsing

struct Field {
  const char* name;  // as in messages
  int min;
  int max;   // largest accepted value (7 for day-of-week, folded onto 0)
  int last;  // the end of "*" and "a/n" (6 for day-of-week: 7 would repeat Sunday)
  const std::array<const char*, 12>* names;  // names[i] stands for min + i; null: no names
  int name_count;
  const char* range_reason;  // "must be ..." for a value out of range
};

constexpr std::array<const char*, 12> kMonthNames = {"JAN", "FEB", "MAR", "APR", "MAY", "JUN",
                                                     "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"};
constexpr std::array<const char*, 12> kWeekdayNames = {"SUN", "MON", "TUE", "WED", "THU", "FRI",
                                                       "SAT", "",    "",    "",    "",    ""};

constexpr std::array<Field, 5> kFields = {{
    {"minute", 0, 59, 59, nullptr, 0, "must be 0 to 59"},
    {"hour", 0, 23, 23, nullptr, 0, "must be 0 to 23"},
    {"day-of-month", 1, 31, 31, nullptr, 0, "must be 1 to 31"},
    {"month", 1, 12, 12, &kMonthNames, 12, "must be 1 to 12 or JAN to DEC"},
    {"day-of-week", 0, 7, 6, &kWeekdayNames, 7, "must be 0 to 7 or SUN to SAT"},
}};

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

// ASCII only: the backend's locale (LC_CTYPE) must not change what a name means.
char AsciiLower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (AsciiLower(a[i]) != AsciiLower(b[i])) return false;
  }
  return true;
}

std::string Quoted(std::string_view s) {
  std::string out = "\"";
  out.append(s);
  out.push_back('"');
  return out;
}

std::string UnexpectedCharacter(char c) {
  if (c < 0x20 || c > 0x7e) return "unexpected non-ASCII or control character";
  return "unexpected character " + Quoted(std::string_view(&c, 1));
}

// Reads a leading number at most `cap` (larger numbers read as cap + 1, so a
// long string of digits is out of range rather than an overflow).
int ReadNumber(std::string_view* s, int cap) {
  int value = 0;
  while (!s->empty() && IsDigit(s->front())) {
    value = std::min(cap + 1, value * 10 + (s->front() - '0'));
    s->remove_prefix(1);
  }
  return value;
}

// Reads one value (a number or a name) of `field` from the front of *s.
bool ReadValue(std::string_view* s, const Field& field, int* value, std::string* reason) {
  if (s->empty() || s->front() == '-' || s->front() == '/') {
    *reason = "a value is missing";
    return false;
  }
  if (IsDigit(s->front())) {
    *value = ReadNumber(s, field.max);
    if (*value < field.min || *value > field.max) {
      *reason = field.range_reason;
      return false;
    }
    return true;
  }
  if (!IsAlpha(s->front())) {
    *reason = UnexpectedCharacter(s->front());
    return false;
  }
  std::size_t length = 0;
  while (length < s->size() && IsAlpha((*s)[length])) ++length;
  const std::string_view word = s->substr(0, length);
  s->remove_prefix(length);
  if (field.names == nullptr) {
    *reason = Quoted(word) + " is not a number";
    return false;
  }
  for (int i = 0; i < field.name_count; ++i) {
    if (EqualsIgnoreCase(word, (*field.names)[i])) {
      *value = field.min + i;
      return true;
    }
  }
  *reason = "unknown " + std::string(field.name) + " name " + Quoted(word);
  return false;
}

// One list element: "*", "a", "a-b", each optionally followed by "/n".
bool ParseElement(std::string_view element, const Field& field, uint64_t* bits,
                  std::string* reason) {
  if (element.empty()) {
    *reason = "empty list element";
    return false;
  }
  const std::string_view text = element;
  int low = field.min;
  int high = field.last;
  if (element.front() == '*') {
    element.remove_prefix(1);
  } else {
    if (!ReadValue(&element, field, &low, reason)) return false;
    high = low;
    if (!element.empty() && element.front() == '-') {
      element.remove_prefix(1);
      if (!ReadValue(&element, field, &high, reason)) return false;
      if (low > high) {
        *reason = "reversed range " + Quoted(text.substr(0, text.size() - element.size()));
        return false;
      }
    } else if (!element.empty() && element.front() == '/') {
      high = std::max(low, field.last);  // "a/n": a to the field's maximum
    }
  }
  int step = 1;
  if (!element.empty() && element.front() == '/') {
    element.remove_prefix(1);
    if (element.empty() || !IsDigit(element.front())) {
      *reason = element.empty() ? "a value is missing" : UnexpectedCharacter(element.front());
      return false;
    }
    step = ReadNumber(&element, field.max);
    if (step < 1 || step > field.max) {
      *reason = "step must be 1 to " + std::to_string(field.max);
      return false;
    }
  }
  if (!element.empty()) {
    *reason = UnexpectedCharacter(element.front());
    return false;
  }
  for (int v = low; v <= high; v += step) *bits |= uint64_t{1} << v;
  return true;
}

bool ParseField(std::string_view text, const Field& field, uint64_t* bits, std::string* error) {
  std::string reason;
  std::string_view rest = text;
  for (;;) {
    const std::size_t comma = rest.find(',');
    if (!ParseElement(rest.substr(0, comma), field, bits, &reason)) {
      *error = "invalid " + std::string(field.name) + " field " + Quoted(text) +
               " in cron spec: " + reason;
      return false;
    }
    if (comma == std::string_view::npos) return true;
    rest.remove_prefix(comma + 1);
  }
}

template <std::size_t N>
std::bitset<N> ToBitset(uint64_t bits) {
  return std::bitset<N>(bits & ((uint64_t{1} << N) - 1));
}

bool ParseCron(std::string_view spec, CronSpec* out, std::string* error) {
  std::array<std::string_view, 5> fields;
  std::size_t count = 0;
  std::string_view rest = spec;
  while (!rest.empty()) {
    std::size_t end = 0;
    while (end < rest.size() && !IsSpace(rest[end])) ++end;
    if (count < fields.size()) fields[count] = rest.substr(0, end);
    ++count;
    rest = Trim(rest.substr(end));
  }
  if (count != fields.size()) {
    *error = "cron spec " + Quoted(spec) + " has " + std::to_string(count) +
             (count == 1 ? " field" : " fields") +
             ": expected 5 (minute hour day-of-month month day-of-week)";
    return false;
  }
  std::array<uint64_t, 5> bits{};
  for (std::size_t i = 0; i < fields.size(); ++i) {
    if (!ParseField(fields[i], kFields[i], &bits[i], error)) return false;
  }
  if (bits[4] & (uint64_t{1} << 7)) bits[4] |= 1;  // 7 is Sunday, like 0
  out->minutes = ToBitset<60>(bits[0]);
  out->hours = ToBitset<24>(bits[1]);
  out->days = ToBitset<32>(bits[2]);
  out->months = ToBitset<13>(bits[3]);
  out->weekdays = ToBitset<7>(bits[4]);
  out->days_restricted = fields[2] != "*";
  out->weekdays_restricted = fields[4] != "*";
  return true;
}

struct Macro {
  const char* name;
  const char* cron;
};

constexpr std::array<Macro, 7> kMacros = {{
    {"@hourly", "0 * * * *"},
    {"@daily", "0 0 * * *"},
    {"@midnight", "0 0 * * *"},
    {"@weekly", "0 0 * * 0"},
    {"@monthly", "0 0 1 * *"},
    {"@yearly", "0 0 1 1 *"},
    {"@annually", "0 0 1 1 *"},
}};

bool ParseMacro(std::string_view spec, ScheduleSpec* out, std::string* error) {
  std::size_t end = 0;
  while (end < spec.size() && !IsSpace(spec[end])) ++end;
  const std::string_view name = spec.substr(0, end);
  const std::string_view argument = Trim(spec.substr(end));
  if (EqualsIgnoreCase(name, "@every")) {
    if (argument.empty()) {
      *error = "\"@every\" needs an interval, e.g. \"@every 5 minutes\"";
      return false;
    }
    out->kind = ScheduleSpec::Kind::kEvery;
    out->every = std::string(argument);
    return true;
  }
  for (const Macro& macro : kMacros) {
    if (!EqualsIgnoreCase(name, macro.name)) continue;
    if (!argument.empty()) {
      *error = "schedule macro " + Quoted(name) + " takes no argument";
      return false;
    }
    out->kind = ScheduleSpec::Kind::kCron;
    return ParseCron(macro.cron, &out->cron, error);
  }
  *error = "unknown schedule macro " + Quoted(name) +
           ": expected @hourly, @daily, @weekly, @monthly, @yearly or @every <interval>";
  return false;
}

// ---------------------------------------------------------------------------
// Next fire

constexpr int64_t kDay = 86400;
constexpr int64_t kMinutesPerDay = 1440;
constexpr int64_t kSearchDays = 8 * 366;
constexpr int64_t kSupportedRange = int64_t{1} << 40;

int64_t FloorDiv(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

// The proleptic Gregorian date of a day number (days since 1970-01-01), by
// H. Hinnant's civil_from_days (http://howardhinnant.github.io/date_algorithms.html).
struct Civil {
  int64_t year;
  int month;  // 1-12
  int day;    // 1-31
};

Civil CivilFromDays(int64_t z) {
  z += 719468;
  const int64_t era = FloorDiv(z, 146097);
  const int64_t doe = z - era * 146097;
  const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const int64_t mp = (5 * doy + 2) / 153;
  const int day = static_cast<int>(doy - (153 * mp + 2) / 5 + 1);
  const int month = static_cast<int>(mp < 10 ? mp + 3 : mp - 9);
  return {yoe + era * 400 + (month <= 2), month, day};
}

int DaysInMonth(int64_t year, int month) {
  static constexpr std::array<int, 12> kLengths = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
  return month == 2 && leap ? 29 : kLengths[month - 1];
}

bool DayMatches(const CronSpec& cron, int64_t day_index, int day_of_month) {
  const int weekday = static_cast<int>(((day_index + 4) % 7 + 7) % 7);  // 1970-01-01: Thursday
  const bool dom = cron.days[day_of_month];
  const bool dow = cron.weekdays[weekday];
  if (cron.days_restricted && cron.weekdays_restricted) return dom || dow;
  return dom && dow;
}

// The first local minute (minutes since the local epoch) >= `from` that
// matches `cron`, on a local day <= `last_day`; false when there is none.
bool NextLocalSlot(const CronSpec& cron, int64_t from, int64_t last_day, int64_t* slot) {
  int64_t day = FloorDiv(from, kMinutesPerDay);
  const int64_t minute_of_day = from - day * kMinutesPerDay;
  int hour = static_cast<int>(minute_of_day / 60);
  int minute = static_cast<int>(minute_of_day % 60);
  while (day <= last_day) {
    const Civil date = CivilFromDays(day);
    if (!cron.months[date.month]) {
      day += DaysInMonth(date.year, date.month) - date.day + 1;  // the 1st of next month
      hour = minute = 0;
      continue;
    }
    if (DayMatches(cron, day, date.day)) {
      for (; hour < 24; ++hour, minute = 0) {
        if (!cron.hours[hour]) continue;
        for (; minute < 60; ++minute) {
          if (cron.minutes[minute]) {
            *slot = day * kMinutesPerDay + hour * 60 + minute;
            return true;
          }
        }
      }
    }
    ++day;
    hour = minute = 0;
  }
  return false;
}

// The earliest valid UTC instant > after_utc of local time `local` (seconds),
// or, when `local` falls in a gap, the gap's transition instant if > after_utc;
// kNeverFires when neither exists.
int64_t ResolveLocal(int64_t local, int64_t after_utc, const ZoneOffsets& zone) {
  // INVARIANT: at most one offset change within a day of `local`, so these
  // are the offsets before and after any transition near it.
  const int64_t before = zone.OffsetAt(local - kDay);
  const int64_t after = zone.OffsetAt(local + kDay);
  int64_t best = kNeverFires;
  for (const int64_t offset : {before, after}) {
    const int64_t utc = local - offset;
    if (utc > after_utc && utc < best && utc + zone.OffsetAt(utc) == local) best = utc;
    if (before == after) break;
  }
  if (best != kNeverFires || after <= before) return best;
  // A gap: `local` is skipped. The transition T satisfies
  // local - after < T <= local - before; find the first instant with the new offset.
  int64_t low = local - after;  // offset `before` here
  int64_t high = local - before;
  while (high - low > 1) {
    const int64_t middle = low + (high - low) / 2;
    if (zone.OffsetAt(middle) == before) {
      low = middle;
    } else {
      high = middle;
    }
  }
  return high > after_utc ? high : kNeverFires;
}

}  // namespace

bool ParseSchedule(std::string_view spec, ScheduleSpec* out, std::string* error) {
  std::string ignored;
  std::string* message = error != nullptr ? error : &ignored;
  const std::string_view text = Trim(spec);
  if (text.empty()) {
    *message = "schedule spec is empty";
    return false;
  }
  ScheduleSpec parsed;
  const bool ok = text.front() == '@' ? ParseMacro(text, &parsed, message)
                                      : ParseCron(text, &parsed.cron, message);
  if (ok) *out = std::move(parsed);
  return ok;
}

int64_t NextCronFire(const CronSpec& cron, int64_t after_utc, const ZoneOffsets& zone) {
  if (after_utc < -kSupportedRange || after_utc > kSupportedRange) return kNeverFires;
  if (cron.minutes.none() || cron.hours.none() || cron.months.none()) return kNeverFires;
  const int64_t local_after = after_utc + zone.OffsetAt(after_utc);
  int64_t from = FloorDiv(local_after, 60) + 1;  // slots strictly after it
  const int64_t last_day = FloorDiv(local_after, kDay) + kSearchDays;
  int64_t slot = 0;
  while (NextLocalSlot(cron, from, last_day, &slot)) {
    const int64_t fire = ResolveLocal(slot * 60, after_utc, zone);
    if (fire != kNeverFires) return fire;
    from = slot + 1;  // only with a zone breaking the invariant
  }
  return kNeverFires;
}

}  // namespace pgq::core
