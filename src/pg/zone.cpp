#include "pg/zone.h"

#include "pg/args.h"
#include "pg/boundary.h"

namespace pgq::pg {

namespace {

// Zone names as pg_timezone_names lists them (as PostgreSQL, any case).
Statement zone_name = {
    "SELECT name FROM pg_catalog.pg_timezone_names"
    " WHERE pg_catalog.lower(name) = pg_catalog.lower($1) LIMIT 1",
    1,
    {TEXTOID},
    nullptr};

}  // namespace

std::optional<std::string> ListedZoneName(SpiSession& spi, std::string_view name) {
  Params params;
  params.Set(0, TextDatum(name));
  const Result found = spi.Execute(zone_name, params);
  if (found.empty()) return std::nullopt;
  return found.Text(0, "name");
}

Zone Zone::Find(std::string_view name) {
  const std::string copy(name);
  // Zone names are short; pg_tzset refuses longer ones by returning NULL.
  pg_tz* tz = copy.find('\0') == std::string::npos ? Guard([&] { return pg_tzset(copy.c_str()); })
                                                   : nullptr;
  if (tz == nullptr) {
    Raise(ERRCODE_INVALID_PARAMETER_VALUE,
          "time zone \"" + copy.substr(0, 80) + "\" not recognized", "",
          "Use a name from pg_timezone_names, such as Europe/Madrid or America/Santiago.");
  }
  return Zone(tz);
}

int32_t Zone::OffsetAt(int64_t utc_seconds) const {
  const pg_time_t t = utc_seconds;
  // pg_localtime neither allocates nor raises; NULL only for absurd times.
  const struct pg_tm* tm = pg_localtime(&t, tz_);
  return tm != nullptr ? static_cast<int32_t>(tm->tm_gmtoff) : 0;
}

int64 UnixSeconds(TimestampTz t) { return timestamptz_to_time_t(t); }

TimestampTz FromUnixSeconds(int64 seconds) { return time_t_to_timestamptz(seconds); }

TimestampTz NextCronSlot(const core::CronSpec& cron, TimestampTz now, const Zone& zone,
                         bool* never) {
  const int64_t next = core::NextCronFire(cron, UnixSeconds(now), zone);
  *never = next == core::kNeverFires;
  return *never ? 0 : FromUnixSeconds(next);
}

}  // namespace pgq::pg
