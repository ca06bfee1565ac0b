// The statements of recurring jobs: pgq.recurring and pgq.schedule_runs
// (store/schedules.h). How a schedule fires is service/schedules.cpp.
#include "store/schedules.h"

#include "pg/args.h"

namespace pgq::store {

namespace {

// Creates the schedule, or replaces one of the same queue. A schedule of
// another queue is left alone (no row returned) but locked: ON CONFLICT
// locks the conflicting row before it tests the WHERE.
pg::Statement upsert_schedule = {
    "INSERT INTO pgq.recurring (name, queue_id, spec, every, timezone, payload, next_run_at)"
    " VALUES ($1, $2, $3, $4, $5, $6, $7)"
    " ON CONFLICT (name) DO UPDATE SET spec = EXCLUDED.spec,"
    "   every = EXCLUDED.every, timezone = EXCLUDED.timezone, payload = EXCLUDED.payload,"
    "   next_run_at = EXCLUDED.next_run_at"
    " WHERE recurring.queue_id = EXCLUDED.queue_id"
    " RETURNING 1",
    7,
    {TEXTOID, INT4OID, TEXTOID, INTERVALOID, TEXTOID, JSONBOID, TIMESTAMPTZOID},
    nullptr};

pg::Statement schedule_queue = {
    "SELECT queue_id FROM pgq.recurring WHERE name = $1", 1, {TEXTOID}, nullptr};

pg::Statement move_schedule = {
    "UPDATE pgq.recurring SET queue_id = $2 WHERE name = $1", 2, {TEXTOID, INT4OID}, nullptr};

pg::Statement delete_schedule = {
    "DELETE FROM pgq.recurring WHERE name = $1 AND queue_id = $2", 2, {TEXTOID, INT4OID}, nullptr};

// $1 now, $2 limit.
pg::Statement due_schedules = {
    "SELECT r.name, r.queue_id, r.spec, r.timezone, r.next_run_at, r.payload,"
    "       q.max_attempts, q.notify, q.name AS queue_name, r.every IS NOT NULL AS is_every"
    "  FROM pgq.recurring r JOIN pgq.queues q ON q.queue_id = r.queue_id"
    " WHERE r.next_run_at <= $1"
    "   AND (r.last_job_id IS NULL"
    "        OR NOT EXISTS (SELECT 1 FROM pgq.job_rows j WHERE j.id = r.last_job_id))"
    " ORDER BY r.next_run_at"
    " LIMIT $2"
    " FOR UPDATE OF r SKIP LOCKED",
    2,
    {TIMESTAMPTZOID, INT4OID},
    nullptr};

// $1 name, $2 next slot (NULL: none yet), $3 fired at, $4 job, $5 the slot.
pg::Statement record_firing = {
    "WITH r AS ("
    "  UPDATE pgq.recurring SET next_run_at = $2, last_run_at = $3, last_job_id = $4"
    "   WHERE name = $1 RETURNING name"
    ") INSERT INTO pgq.schedule_runs (name, slot, fired_at, job_id) SELECT name, $5, $3, $4 FROM r",
    5,
    {TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, INT8OID, TIMESTAMPTZOID},
    nullptr};

pg::Statement rearm_every = {
    "UPDATE pgq.recurring r SET next_run_at = $1 + r.every"
    " WHERE r.every IS NOT NULL AND r.next_run_at IS NULL"
    "   AND (r.last_job_id IS NULL"
    "        OR NOT EXISTS (SELECT 1 FROM pgq.job_rows j WHERE j.id = r.last_job_id))",
    1,
    {TIMESTAMPTZOID},
    nullptr};

pg::Statement drop_old_runs = {
    "DELETE FROM pgq.schedule_runs WHERE ctid = ANY (ARRAY("
    "  SELECT sr.ctid FROM pgq.schedule_runs sr"
    "    JOIN pgq.recurring r ON r.name = sr.name"
    "    JOIN pgq.queues q ON q.queue_id = r.queue_id"
    "   WHERE sr.fired_at < $1 - q.retention LIMIT $2))",
    2,
    {TIMESTAMPTZOID, INT4OID},
    nullptr};

}  // namespace

bool UpsertSchedule(pg::SpiSession& spi, const NewSchedule& schedule) {
  pg::Params params;
  params.Set(0, pg::TextDatum(schedule.name))
      .Set(1, Int32GetDatum(schedule.queue_id))
      .Set(2, pg::TextDatum(schedule.spec))
      .SetOptional(3, schedule.every == nullptr, IntervalPGetDatum(schedule.every))
      .Set(4, pg::TextDatum(schedule.timezone))
      .Set(5, schedule.payload)
      .Set(6, TimestampTzGetDatum(schedule.next_run_at));
  return spi.Execute(upsert_schedule, params).size() == 1;
}

std::optional<int32> ScheduleQueue(pg::SpiSession& spi, std::string_view name) {
  pg::Params params;
  params.Set(0, pg::TextDatum(name));
  const pg::Result found = spi.Execute(schedule_queue, params);
  if (found.empty()) return std::nullopt;
  return found.Int32(0, "queue_id");
}

void MoveSchedule(pg::SpiSession& spi, std::string_view name, int32 queue_id) {
  pg::Params params;
  params.Set(0, pg::TextDatum(name)).Set(1, Int32GetDatum(queue_id));
  spi.Execute(move_schedule, params);
}

bool DeleteSchedule(pg::SpiSession& spi, std::string_view name, int32 queue_id) {
  pg::Params params;
  params.Set(0, pg::TextDatum(name)).Set(1, Int32GetDatum(queue_id));
  return spi.Execute(delete_schedule, params).size() == 1;
}

std::vector<DueSchedule> DueSchedules(pg::SpiSession& spi, TimestampTz now, int32 limit) {
  pg::Params params;
  params.Set(0, TimestampTzGetDatum(now)).Set(1, Int32GetDatum(limit));
  const pg::Result rows = spi.Execute(due_schedules, params);
  std::vector<DueSchedule> due;
  if (rows.empty()) return due;
  const int name = rows.ColumnNumber("name"), queue_id = rows.ColumnNumber("queue_id"),
            spec = rows.ColumnNumber("spec"), zone = rows.ColumnNumber("timezone"),
            slot = rows.ColumnNumber("next_run_at"), payload = rows.ColumnNumber("payload"),
            max_attempts = rows.ColumnNumber("max_attempts"), notify = rows.ColumnNumber("notify"),
            queue = rows.ColumnNumber("queue_name"), every = rows.ColumnNumber("is_every");
  due.reserve(rows.size());
  for (uint64 row = 0; row < rows.size(); ++row) {
    bool is_null = false;
    due.push_back(DueSchedule{rows.Text(row, name), rows.Int32(row, queue_id), rows.Text(row, spec),
                              rows.Text(row, zone), rows.Value(row, slot, &is_null),
                              rows.Value(row, payload, &is_null), rows.Int32(row, max_attempts),
                              rows.Bool(row, notify), rows.Text(row, queue),
                              rows.Bool(row, every)});
  }
  return due;
}

void RecordFiring(pg::SpiSession& spi, std::string_view name, std::optional<TimestampTz> next,
                  TimestampTz fired_at, int64 job_id, Datum slot) {
  pg::Params firing;
  firing.Set(0, pg::TextDatum(name))
      .SetOptional(1, !next.has_value(), TimestampTzGetDatum(next.value_or(0)))
      .Set(2, TimestampTzGetDatum(fired_at))
      .Set(3, Int64GetDatum(job_id))
      .Set(4, slot);
  spi.Execute(record_firing, firing);
}

void RearmFinishedEverySchedules(pg::SpiSession& spi, TimestampTz now) {
  pg::Params params;
  params.Set(0, TimestampTzGetDatum(now));
  spi.Execute(rearm_every, params);
}

int64 DropOldScheduleRuns(pg::SpiSession& spi, TimestampTz now, int32 limit) {
  pg::Params params;
  params.Set(0, TimestampTzGetDatum(now)).Set(1, Int32GetDatum(limit));
  return static_cast<int64>(spi.Execute(drop_old_runs, params).size());
}

}  // namespace pgq::store
