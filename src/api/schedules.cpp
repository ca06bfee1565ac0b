// pgq.schedule and pgq.unschedule: the arguments, the rights and the
// checks that keep a schedule from failing at fire time. The rows are the
// store's (store/schedules.h); firing them is a service
// (service/schedules.h), which maintenance runs.
#include "service/queue_ref.h"
#include "service/rights.h"
#include "core/cron.h"
#include "core/validate.h"
#include "pg/args.h"
#include "pg/settings.h"
#include "pg/zone.h"
#include "service/schedules.h"
#include "store/schedules.h"

namespace pgq::api {

namespace {

// A schedule's time zone: a name of the tz database, as pg_timezone_names
// lists it, in its canonical spelling. PostgreSQL also takes POSIX-style
// specs ('+01:00', 'garbage5') in SET TIME ZONE, where '+01:00' means an
// hour west of UTC, the opposite of ISO 8601 and of SET TIME ZONE INTERVAL
// '+01:00': too easy to get backwards in a schedule, so refused (issue 15,
// L2). Schedules stored before keep firing in the zone they were given.
std::string CheckedZoneName(pg::SpiSession& spi, std::string_view name) {
  std::optional<std::string> listed = pg::ListedZoneName(spi, name);
  if (!listed) {
    pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE,
              "time zone \"" + std::string(name.substr(0, 80)) + "\" not recognized",
              "A schedule's time zone is a name from pg_timezone_names; POSIX-style specs such as "
              "'+01:00' are refused, their sign being the opposite of ISO 8601's.",
              "Use a name such as UTC, Europe/Madrid or America/Santiago (Etc/GMT-1 is UTC+01).");
  }
  return std::move(*listed);
}

// The shortest @every delay: a schedule is not a busy loop.
constexpr int64 kMinEveryMicros = USECS_PER_SEC;

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
  const core::ScheduleSpec parsed = service::ParseScheduleSpec(spec);
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

  const service::QueueRef ref = service::FindQueue(spi, queue);
  // A schedule is run by the queue's admins and sends jobs into it: both.
  service::RequireRight(spi, ref.id, queue, core::kAdmin);
  service::RequireRight(spi, ref.id, queue, core::kProduce);
  const store::NewSchedule schedule{name, ref.id, spec, every, canonical_zone, payload, next};
  if (store::UpsertSchedule(spi, schedule)) PG_RETURN_VOID();
  // The name belongs to a schedule of another queue (locked now): moving it
  // takes the admin right on that queue too, and a role without it learns
  // nothing about that queue (issue 15, M2).
  const std::optional<int32> old_queue = store::ScheduleQueue(spi, name);
  if (!old_queue) pg::Raise(ERRCODE_INTERNAL_ERROR, "locked schedule row vanished");
  if (!service::HoldsRight(spi, GetUserId(), *old_queue, core::kAdmin)) {
    pg::Raise(ERRCODE_INSUFFICIENT_PRIVILEGE,
              "permission denied for schedule \"" + std::string(name) + "\"",
              "A schedule of that name exists on a queue you do not administer.",
              "Choose another name.");
  }
  store::MoveSchedule(spi, name, ref.id);
  store::UpsertSchedule(spi, schedule);
  PG_RETURN_VOID();
}

// unschedule(name) returns whether it existed
PGQ_FUNCTION(pgq_unschedule) {
  const std::string_view name = pg::KeyArg(fcinfo, 0, "schedule name");
  pg::SpiSession spi;
  service::RequireRightSomewhere(spi, core::kAdmin);
  // A schedule of a queue the caller does not administer is answered as one
  // that does not exist: false, and nothing learnt (issue 15, L4). The
  // delete names the queue checked: a schedule moved meanwhile is not it.
  const std::optional<int32> queue_id = store::ScheduleQueue(spi, name);
  if (!queue_id) PG_RETURN_BOOL(false);
  if (!service::HoldsRight(spi, GetUserId(), *queue_id, core::kAdmin)) PG_RETURN_BOOL(false);
  PG_RETURN_BOOL(store::DeleteSchedule(spi, name, *queue_id));
}
