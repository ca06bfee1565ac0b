// Time zones for schedules: PostgreSQL's own tz database (the one behind
// timestamptz and pg_timezone_names) seen through core::ZoneOffsets, and the
// conversions between TimestampTz and the core's Unix seconds.
#pragma once

#include <optional>
#include <string>

#include "core/cron.h"
#include "pg/pg.h"
#include "pg/spi.h"

extern "C" {
#include "pgtime.h"
}

namespace pgq::pg {

class Zone final : public core::ZoneOffsets {
 public:
  // The zone named `name`, or invalid_parameter_value.
  static Zone Find(std::string_view name);

  int32_t OffsetAt(int64_t utc_seconds) const override;

 private:
  explicit Zone(pg_tz* tz) : tz_(tz) {}
  pg_tz* tz_;  // owned by PostgreSQL's zone cache, lives for the backend
};

// The zone named `name` (in any case) as pg_timezone_names spells it, if it
// lists it.
std::optional<std::string> ListedZoneName(SpiSession& spi, std::string_view name);

int64 UnixSeconds(TimestampTz t);
TimestampTz FromUnixSeconds(int64 seconds);

// The slot of `cron` after `now` in `zone`; 0 (never) as core::kNeverFires.
TimestampTz NextCronSlot(const core::CronSpec& cron, TimestampTz now, const Zone& zone,
                         bool* never);

}  // namespace pgq::pg
