// Firing due schedules (for maintenance).
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
#include "service/schedules.h"

#include "core/validate.h"
#include "pg/queue_lock.h"
#include "pg/trace_context.h"
#include "pg/zone.h"
#include "store/jobs.h"
#include "store/schedules.h"

namespace pgq::service {

core::ScheduleSpec ParseScheduleSpec(std::string_view spec) {
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

int64 FireDueSchedules(pg::SpiSession& spi, TimestampTz now, int32 limit) {
  const std::vector<store::DueSchedule> due = store::DueSchedules(spi, now, limit);
  int64 fired = 0;
  for (const store::DueSchedule& d : due) {
    // A drop_queue waiting for this queue would wait for our row lock too.
    if (!pg::TryLockQueueShared(d.queue_id)) continue;

    bool never = false;
    TimestampTz next = 0;
    if (!d.every) {
      const core::ScheduleSpec parsed = ParseScheduleSpec(d.spec);
      next = pg::NextCronSlot(parsed.cron, now, pg::Zone::Find(d.zone), &never);
    }

    // A firing starts a trace of its own (ADR 0030): every attempt of its
    // job shares it, whoever ran the maintenance (never the caller's
    // pgq.trace_context: a pgq.maintain() in a traced transaction would
    // make every firing part of that trace).
    store::NewJob job{d.payload, now, 0, d.max_attempts, 0, 0, {}};
    job.trace_context = pg::NewTraceContext();
    const int64 job_id = *store::Insert(spi, {d.queue_id, d.queue, d.notify}, job);
    store::RecordFiring(spi, d.name,
                        d.every || never ? std::nullopt : std::optional<TimestampTz>(next), now,
                        job_id, d.slot);
    ++fired;
  }
  return fired;
}

}  // namespace pgq::service
