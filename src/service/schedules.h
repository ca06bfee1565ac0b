// Recurring jobs, the firing side: what maintenance (pgq.maintain() and the
// worker) runs, and the spec rules pgq.schedule checks with the same code
// that fires, so that a schedule accepted never fails at fire time.
#pragma once

#include <string_view>

#include "core/cron.h"
#include "pg/spi.h"

namespace pgq::service {

// `spec` parsed (5 cron fields, @hourly ... or @every <interval>), or
// invalid_parameter_value.
core::ScheduleSpec ParseScheduleSpec(std::string_view spec);

// Fires up to `limit` due schedules as of `now`, each into its queue, in
// the current transaction; returns how many fired. A schedule another
// runner is firing (its row locked) is skipped, so two runners never fire
// one slot twice.
int64 FireDueSchedules(pg::SpiSession& spi, TimestampTz now, int32 limit);

}  // namespace pgq::service
