// Helpers shared by the cron unit tests (cron_parse_test.cpp, cron_next_test.cpp):
// parsing a spec that must be valid, UTC civil times by glibc, and ZoneOffsets
// implementations (fixed, one synthetic transition, a real zone through glibc).
#pragma once

#include "core/cron.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <string>

namespace pgq::core::cron_test {

inline CronSpec Cron(const std::string& spec) {
  ScheduleSpec parsed;
  std::string error;
  EXPECT_TRUE(ParseSchedule(spec, &parsed, &error)) << spec << ": " << error;
  EXPECT_EQ(parsed.kind, ScheduleSpec::Kind::kCron) << spec;
  return parsed.cron;
}

// UTC seconds of a UTC civil time, by glibc (independent of the code under test).
inline int64_t Utc(int year, int month, int day, int hour = 0, int minute = 0, int second = 0) {
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

inline const FixedZone kUtc(0);

inline int64_t Next(const std::string& spec, int64_t after, const ZoneOffsets& zone = kUtc) {
  return NextCronFire(Cron(spec), after, zone);
}

}  // namespace pgq::core::cron_test
