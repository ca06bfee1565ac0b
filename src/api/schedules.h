// Recurring jobs: the maintenance side (firing due schedules), shared by
// pgq.maintain() and the maintenance worker. The SQL functions are in
// schedules.cpp too.
#pragma once

#include "pg/spi.h"

namespace pgq::api {

// Fires up to `limit` due schedules as of `now`, each into its queue, in
// the current transaction; returns how many fired. A schedule another
// runner is firing (its row locked) is skipped, so two runners never fire
// one slot twice.
int64 FireDueSchedules(pg::SpiSession& spi, TimestampTz now, int32 limit);

// @every schedules whose last run has finished get their next slot: one
// interval from now.
void RearmFinishedEverySchedules(pg::SpiSession& spi, TimestampTz now);

// Drops up to `limit` firings older than their queue's retention; returns
// how many.
int64 DropOldScheduleRuns(pg::SpiSession& spi, TimestampTz now, int32 limit);

}  // namespace pgq::api
