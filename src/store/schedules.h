// Recurring jobs: the statements on pgq.recurring (one row per schedule,
// the slot it fires next) and pgq.schedule_runs (its firings, kept for the
// queue's retention). Firing due schedules (the enqueue, the next slot) is a
// service (service/schedules.h); the SQL functions are api/schedules.cpp.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pg/spi.h"

namespace pgq::store {

// A schedule as pgq.schedule stores it.
struct NewSchedule {
  std::string_view name;
  int32 queue_id;
  std::string_view spec;
  Interval* every;  // the delay of an @every spec, nullptr for cron
  std::string_view timezone;
  Datum payload;  // jsonb
  TimestampTz next_run_at;
};

// Creates the schedule, or replaces one of the same queue: true. A schedule
// of that name on another queue is left alone (false) but locked until the
// end of the transaction.
bool UpsertSchedule(pg::SpiSession& spi, const NewSchedule& schedule);
// The queue of schedule `name`, if there is one.
std::optional<int32> ScheduleQueue(pg::SpiSession& spi, std::string_view name);
// Moves schedule `name` to queue `queue_id` (the upsert then replaces the
// rest).
void MoveSchedule(pg::SpiSession& spi, std::string_view name, int32 queue_id);
// Deletes schedule `name` if it is still of queue `queue_id`; whether it did.
bool DeleteSchedule(pg::SpiSession& spi, std::string_view name, int32 queue_id);

// A schedule due at `now`, its row locked until the end of the transaction.
struct DueSchedule {
  std::string name;
  int32 queue_id;
  std::string spec;
  std::string zone;
  Datum slot;     // timestamptz: the slot it fires
  Datum payload;  // INVARIANT: in the caller's SpiSession, until it ends
  int32 max_attempts;
  bool notify;
  std::string queue;
  bool every;  // an @every schedule: fired again one interval after its job finished
};
// Up to `limit` schedules due at `now` whose previous job is gone, in slot
// order; rows another runner holds locked are skipped (FOR UPDATE SKIP
// LOCKED), so two runners never fire one slot twice.
std::vector<DueSchedule> DueSchedules(pg::SpiSession& spi, TimestampTz now, int32 limit);
// Schedule `name` fired slot `slot` at `fired_at` as job `job_id`; it fires
// next at `next` (none: not until its job is gone, or never).
void RecordFiring(pg::SpiSession& spi, std::string_view name, std::optional<TimestampTz> next,
                  TimestampTz fired_at, int64 job_id, Datum slot);
// @every schedules whose last run has finished get their next slot: one
// interval from `now`.
void RearmFinishedEverySchedules(pg::SpiSession& spi, TimestampTz now);
// Drops up to `limit` firings older than their queue's retention; returns
// how many.
int64 DropOldScheduleRuns(pg::SpiSession& spi, TimestampTz now, int32 limit);

}  // namespace pgq::store
