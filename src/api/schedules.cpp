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
#include "core/validate.h"
#include "pg/allocator.h"
#include "pg/args.h"
#include "pg/queue_lock.h"
#include "pg/settings.h"
#include "pg/zone.h"
#include "store/jobs.h"

namespace pgq::api {

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

// Moves a schedule to another queue (the caller may administer both); the
// upsert then replaces the rest.
pg::Statement move_schedule = {
    "UPDATE pgq.recurring SET queue_id = $2 WHERE name = $1", 2, {TEXTOID, INT4OID}, nullptr};

pg::Statement delete_schedule = {
    "DELETE FROM pgq.recurring WHERE name = $1 AND queue_id = $2", 2, {TEXTOID, INT4OID}, nullptr};

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

// Zone names as pg_timezone_names lists them (as PostgreSQL, any case).
pg::Statement zone_name = {
    "SELECT name FROM pg_catalog.pg_timezone_names"
    " WHERE pg_catalog.lower(name) = pg_catalog.lower($1) LIMIT 1",
    1,
    {TEXTOID},
    nullptr};

// A schedule's time zone: a name of the tz database, as pg_timezone_names
// lists it, in its canonical spelling. PostgreSQL also takes POSIX-style
// specs ('+01:00', 'garbage5') in SET TIME ZONE, where '+01:00' means an
// hour west of UTC, the opposite of ISO 8601 and of SET TIME ZONE INTERVAL
// '+01:00': too easy to get backwards in a schedule, so refused (issue 15,
// L2). Schedules stored before keep firing in the zone they were given.
std::string CheckedZoneName(pg::SpiSession& spi, std::string_view name) {
  pg::Params params;
  params.Set(0, pg::TextDatum(name));
  const pg::Result found = spi.Execute(zone_name, params);
  if (found.empty()) {
    pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE,
              "time zone \"" + std::string(name.substr(0, 80)) + "\" not recognized",
              "A schedule's time zone is a name from pg_timezone_names; POSIX-style specs such as "
              "'+01:00' are refused, their sign being the opposite of ISO 8601's.",
              "Use a name such as UTC, Europe/Madrid or America/Santiago (Etc/GMT-1 is UTC+01).");
  }
  return found.Text(0, 1);
}

// The shortest @every delay: a schedule is not a busy loop.
constexpr int64 kMinEveryMicros = USECS_PER_SEC;

core::ScheduleSpec ParseSpec(std::string_view spec) {
  if (spec.size() > core::kMaxScheduleSpecBytes) {
    pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE,
              "spec must be at most " + std::to_string(core::kMaxScheduleSpecBytes) + " bytes",
              "It is " + std::to_string(spec.size()) + " bytes.");
  }
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
  const int64 micros = pg::IntervalMicros(every, "@every");
  if (micros < kMinEveryMicros) {
    pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE, "@every interval must be at least 1 second",
              "It is " + text + ".");
  }
  if (micros > core::kMaxSettingIntervalMicros) {
    pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE, "@every interval must be at most 100 years",
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
  const pg::Result rows = spi.Execute(due_schedules, params);
  auto due = pg::MakeSmallVector<Due, 8>(CurrentMemoryContext);
  for (uint64 row = 0; row < rows.size(); ++row) {
    bool is_null = false;
    due.push_back(Due{rows.Text(row, 1), rows.Int32(row, 2), rows.Text(row, 3), rows.Text(row, 4),
                      rows.Value(row, 5, &is_null), rows.Value(row, 6, &is_null),
                      rows.Int32(row, 7), rows.Bool(row, 8), rows.Text(row, 9),
                      rows.Bool(row, 10)});
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

    const store::NewJob job{d.payload, now, 0, d.max_attempts, 0, 0, {}};
    const int64 job_id = *store::Insert(spi, {d.queue_id, d.queue, d.notify}, job);

    pg::Params firing;
    firing.Set(0, pg::TextDatum(d.name))
        .SetOptional(1, d.every || never, TimestampTzGetDatum(next))
        .Set(2, TimestampTzGetDatum(now))
        .Set(3, Int64GetDatum(job_id))
        .Set(4, d.slot);
    spi.Execute(record_firing, firing);
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
  return static_cast<int64>(spi.Execute(drop_old_runs, params).size());
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
  pg::SpiSession spi;
  const std::string canonical_zone = api::CheckedZoneName(spi, zone_name);
  const pg::Zone zone = pg::Zone::Find(canonical_zone);
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

  const api::QueueRef ref = api::FindQueue(spi, queue);
  // A schedule is run by the queue's admins and sends jobs into it: both.
  api::RequireRight(spi, ref.id, queue, core::kAdmin);
  api::RequireRight(spi, ref.id, queue, core::kProduce);
  pg::Params params;
  params.Set(0, pg::TextDatum(name))
      .Set(1, Int32GetDatum(ref.id))
      .Set(2, pg::TextDatum(spec))
      .SetOptional(3, every == nullptr, IntervalPGetDatum(every))
      .Set(4, pg::TextDatum(canonical_zone))
      .Set(5, payload)
      .Set(6, TimestampTzGetDatum(next));
  if (spi.Execute(api::upsert_schedule, params).size() == 1) PG_RETURN_VOID();
  // The name belongs to a schedule of another queue (locked now): moving it
  // takes the admin right on that queue too, and a role without it learns
  // nothing about that queue (issue 15, M2).
  pg::Params by_name;
  by_name.Set(0, pg::TextDatum(name));
  const int32 old_queue = spi.Execute(api::schedule_queue, by_name).Int32(0, 1);
  if (!api::HoldsRight(spi, GetUserId(), old_queue, core::kAdmin)) {
    pg::Raise(ERRCODE_INSUFFICIENT_PRIVILEGE,
              "permission denied for schedule \"" + std::string(name) + "\"",
              "A schedule of that name exists on a queue you do not administer.",
              "Choose another name.");
  }
  pg::Params move;
  move.Set(0, pg::TextDatum(name)).Set(1, Int32GetDatum(ref.id));
  spi.Execute(api::move_schedule, move);
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
  // A schedule of a queue the caller does not administer is answered as one
  // that does not exist: false, and nothing learnt (issue 15, L4). The
  // delete names the queue checked: a schedule moved meanwhile is not it.
  const pg::Result found = spi.Execute(api::schedule_queue, params);
  if (found.empty()) PG_RETURN_BOOL(false);
  const int32 queue_id = found.Int32(0, 1);
  if (!api::HoldsRight(spi, GetUserId(), queue_id, core::kAdmin)) PG_RETURN_BOOL(false);
  params.Set(1, Int32GetDatum(queue_id));
  PG_RETURN_BOOL(spi.Execute(api::delete_schedule, params).size() == 1);
}
