// pgq.schedule, pgq.unschedule, and firing due schedules (for maintenance).
//
// A schedule's row holds the slot it fires next (next_run_at). Firing is one
// transaction: lock the due row (FOR UPDATE SKIP LOCKED: another runner's
// row is skipped, not waited for), enqueue the job, move next_run_at to the
// next slot, record the run. A runner that dies mid-way rolls all of it
// back, and the slot is still due for the next runner: the row lock is the
// firing's lease, and its end (commit or abort) is the recovery.
//
// A slot is not fired while the schedule's previous job is pending or
// running; it fires once that job is gone, so slots missed meanwhile (or
// while the server was down) fire once, and the next slot is counted from
// the time of firing. @every schedules are a fixed delay instead: after
// firing, next_run_at is NULL until the job finishes, then one interval
// from then.
#include "api/schedules.h"

#include "api/queue_ref.h"
#include "api/rights.h"
#include "core/cron.h"
#include "pg/allocator.h"
#include "pg/args.h"
#include "pg/queue_lock.h"
#include "pg/settings.h"
#include "pg/zone.h"

namespace pgq::api {

namespace {

pg::Statement upsert_schedule = {
    "INSERT INTO pgq.recurring (name, queue_id, spec, every, timezone, payload, next_run_at)"
    " VALUES ($1, $2, $3, $4, $5, $6, $7)"
    " ON CONFLICT (name) DO UPDATE SET queue_id = EXCLUDED.queue_id, spec = EXCLUDED.spec,"
    "   every = EXCLUDED.every, timezone = EXCLUDED.timezone, payload = EXCLUDED.payload,"
    "   next_run_at = EXCLUDED.next_run_at",
    7,
    {TEXTOID, INT4OID, TEXTOID, INTERVALOID, TEXTOID, JSONBOID, TIMESTAMPTZOID},
    nullptr};

pg::Statement delete_schedule = {
    "DELETE FROM pgq.recurring WHERE name = $1 RETURNING queue_id", 1, {TEXTOID}, nullptr};

// $1 now, $2 limit. Columns: name, queue_id, spec, timezone, next_run_at,
// payload, max_attempts, notify, queue name, is @every.
pg::Statement due_schedules = {
    "SELECT r.name, r.queue_id, r.spec, r.timezone, r.next_run_at, r.payload,"
    "       q.max_attempts, q.notify, q.name, r.every IS NOT NULL"
    "  FROM pgq.recurring r JOIN pgq.queues q ON q.queue_id = r.queue_id"
    " WHERE r.next_run_at <= $1"
    "   AND (r.last_job_id IS NULL"
    "        OR NOT EXISTS (SELECT 1 FROM pgq.jobs j WHERE j.id = r.last_job_id))"
    " ORDER BY r.next_run_at"
    " LIMIT $2"
    " FOR UPDATE OF r SKIP LOCKED",
    2,
    {TIMESTAMPTZOID, INT4OID},
    nullptr};

pg::Statement insert_scheduled_job = {
    "INSERT INTO pgq.jobs (id, queue_id, state, priority, run_at, attempt, max_attempts,"
    "                      enqueued_at, payload)"
    " VALUES (pg_catalog.nextval('pgq.job_id_seq'), $1, 'p', 0, $2, 0, $3, pg_catalog.now(), $4)"
    " RETURNING id",
    4,
    {INT4OID, TIMESTAMPTZOID, INT4OID, JSONBOID},
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
    "        OR NOT EXISTS (SELECT 1 FROM pgq.jobs j WHERE j.id = r.last_job_id))",
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

// The shortest @every delay: a schedule is not a busy loop.
constexpr int64 kMinEveryMicros = USECS_PER_SEC;

core::ScheduleSpec ParseSpec(std::string_view spec) {
  core::ScheduleSpec parsed;
  std::string error;
  if (!core::ParseSchedule(spec, &parsed, &error)) {
    pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE, error, "",
              "Use 5 cron fields (minute hour day-of-month month day-of-week), @hourly, @daily, "
              "@weekly, @monthly, or @every <interval>.");
  }
  return parsed;
}

// The interval of an @every spec, validated.
Interval* EveryInterval(const std::string& text) {
  Interval* every = nullptr;
  try {
    every = pg::Guard([&] {
      return DatumGetIntervalP(DirectFunctionCall3(interval_in, CStringGetDatum(text.c_str()),
                                                   ObjectIdGetDatum(InvalidOid),
                                                   Int32GetDatum(-1)));
    });
  } catch (const pg::PgError&) {
    pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE, "invalid interval \"" + text + "\" in @every spec",
              "", "Write it as PostgreSQL interval input, for example @every 2 hours.");
  }
  if (pg::IntervalMicros(every, "@every") < kMinEveryMicros) {
    pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE, "@every interval must be at least 1 second",
              "It is " + text + ".");
  }
  return every;
}

}  // namespace

int64 FireDueSchedules(pg::SpiSession& spi, TimestampTz now, int32 limit) {
  struct Due {
    std::string name;
    int32 queue_id;
    std::string spec;
    std::string zone;
    Datum slot;
    Datum payload;  // INVARIANT: in the due result, which lives until the session ends
    int32 max_attempts;
    bool notify;
    std::string queue;
    bool every;
  };
  pg::Params params;
  params.Set(0, TimestampTzGetDatum(now)).Set(1, Int32GetDatum(limit));
  const uint64 count = spi.Execute(due_schedules, params);
  auto due = pg::MakeSmallVector<Due, 8>(CurrentMemoryContext);
  for (uint64 row = 0; row < count; ++row) {
    bool is_null = false;
    due.push_back(Due{spi.Text(row, 1), spi.Int32(row, 2), spi.Text(row, 3), spi.Text(row, 4),
                      spi.Value(row, 5, &is_null), spi.Value(row, 6, &is_null), spi.Int32(row, 7),
                      spi.Bool(row, 8), spi.Text(row, 9), spi.Bool(row, 10)});
  }

  int64 fired = 0;
  for (const Due& d : due) {
    // A drop_queue waiting for this queue would wait for our row lock too.
    if (!pg::TryLockQueueShared(d.queue_id)) continue;

    bool never = false;
    TimestampTz next = 0;
    if (!d.every) {
      const core::ScheduleSpec parsed = ParseSpec(d.spec);
      next = pg::NextCronSlot(parsed.cron, now, pg::Zone::Find(d.zone), &never);
    }

    pg::Params job;
    job.Set(0, Int32GetDatum(d.queue_id))
        .Set(1, TimestampTzGetDatum(now))
        .Set(2, Int32GetDatum(d.max_attempts))
        .Set(3, d.payload);
    spi.Execute(insert_scheduled_job, job);
    const int64 job_id = spi.Int64(0, 1);

    pg::Params firing;
    firing.Set(0, pg::TextDatum(d.name))
        .SetOptional(1, d.every || never, TimestampTzGetDatum(next))
        .Set(2, TimestampTzGetDatum(now))
        .Set(3, Int64GetDatum(job_id))
        .Set(4, d.slot);
    spi.Execute(record_firing, firing);
    AnnounceNewJobs(spi, d.queue_id, d.notify, d.queue, core::ClaimKey{0, now, job_id});
    ++fired;
  }
  return fired;
}

void RearmFinishedEverySchedules(pg::SpiSession& spi, TimestampTz now) {
  pg::Params params;
  params.Set(0, TimestampTzGetDatum(now));
  spi.Execute(rearm_every, params);
}

int64 DropOldScheduleRuns(pg::SpiSession& spi, TimestampTz now, int32 limit) {
  pg::Params params;
  params.Set(0, TimestampTzGetDatum(now)).Set(1, Int32GetDatum(limit));
  return static_cast<int64>(spi.Execute(drop_old_runs, params));
}

}  // namespace pgq::api

using namespace pgq;

// schedule(name, queue, spec, payload, timezone): create or replace
PGQ_FUNCTION(pgq_schedule) {
  const std::string_view name = pg::KeyArg(fcinfo, 0, "schedule name");
  const std::string_view queue = pg::QueueNameArg(fcinfo, 1);
  const std::string_view spec = pg::RequiredText(fcinfo, 2, "spec");
  const Datum payload = pg::RequiredPayload(fcinfo, 3);
  const std::string_view zone_name = pg::RequiredText(fcinfo, 4, "timezone");

  // Everything is checked here, so that a schedule never fails at fire time.
  const core::ScheduleSpec parsed = api::ParseSpec(spec);
  const pg::Zone zone = pg::Zone::Find(zone_name);
  const TimestampTz now = pg::Now();
  Interval* every = nullptr;
  TimestampTz next = 0;
  if (parsed.kind == core::ScheduleSpec::Kind::kEvery) {
    every = api::EveryInterval(parsed.every);
    // The first run one interval from now.
    next = pg::Guard([&] {
      return DatumGetTimestampTz(DirectFunctionCall2(
          timestamptz_pl_interval, TimestampTzGetDatum(now), IntervalPGetDatum(every)));
    });
  } else {
    bool never = false;
    next = pg::NextCronSlot(parsed.cron, now, zone, &never);
    if (never) {
      pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE,
                "cron spec \"" + std::string(spec) + "\" never fires",
                "No date in the next 8 years matches it.");
    }
  }

  pg::SpiSession spi;
  const api::QueueRef ref = api::FindQueue(spi, queue);
  api::RequireRight(spi, ref.id, queue, core::kAdmin);
  pg::Params params;
  params.Set(0, pg::TextDatum(name))
      .Set(1, Int32GetDatum(ref.id))
      .Set(2, pg::TextDatum(spec))
      .SetOptional(3, every == nullptr, IntervalPGetDatum(every))
      .Set(4, pg::TextDatum(zone_name))
      .Set(5, payload)
      .Set(6, TimestampTzGetDatum(next));
  spi.Execute(api::upsert_schedule, params);
  PG_RETURN_VOID();
}

// unschedule(name) returns whether it existed
PGQ_FUNCTION(pgq_unschedule) {
  const std::string_view name = pg::KeyArg(fcinfo, 0, "schedule name");
  pg::SpiSession spi;
  api::RequireRightSomewhere(spi, core::kAdmin);
  pg::Params params;
  params.Set(0, pg::TextDatum(name));
  if (spi.Execute(api::delete_schedule, params) == 0) PG_RETURN_BOOL(false);
  // A schedule of another queue: the error rolls the delete back.
  api::RequireRightOnQueueId(spi, spi.Int32(0, 1), core::kAdmin);
  PG_RETURN_BOOL(true);
}
