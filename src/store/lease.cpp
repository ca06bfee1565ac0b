// A claim's lease: extend, release, snooze and progress, fenced by
// (id, attempt) like the end of a claim (finish.cpp), within the caller's
// Scope.
#include "pg/ledger.h"
#include "pg/settings.h"
#include "store/internal.h"
#include "store/ring_jobs.h"

namespace pgq::store {

namespace {

pg::Statement extend_lease = {R"sql(
UPDATE pgq.job_rows SET lease_until = $3
 WHERE id = $1 AND attempt = $2 AND state = 'r' AND ($4 OR queue_id = ANY ($5))
RETURNING lease_until)sql",
                              5,
                              {INT8OID, INT4OID, TIMESTAMPTZOID, BOOLOID, INT4ARRAYOID},
                              nullptr};

// The next claim increments attempt again, so it carries the same number.
pg::Statement release_job = {R"sql(
UPDATE pgq.job_rows SET state = 'p', attempt = attempt - 1, lease_until = NULL
 WHERE id = $1 AND attempt = $2 AND state = 'r' AND ($3 OR queue_id = ANY ($4))
RETURNING queue_id, priority, run_at, id)sql",
                             4,
                             {INT8OID, INT4OID, BOOLOID, INT4ARRAYOID},
                             nullptr};

// Release's move, due at $3 ("not now" is not a failure: the attempt is
// not spent, and last_error stays the last real one).
pg::Statement snooze_job = {R"sql(
UPDATE pgq.job_rows SET state = 'p', attempt = attempt - 1, lease_until = NULL, run_at = $3
 WHERE id = $1 AND attempt = $2 AND state = 'r' AND ($4 OR queue_id = ANY ($5))
RETURNING queue_id, priority, run_at, id)sql",
                            5,
                            {INT8OID, INT4OID, TIMESTAMPTZOID, BOOLOID, INT4ARRAYOID},
                            nullptr};

// No indexed column changes: a HOT update, however often a handler reports.
pg::Statement set_progress = {R"sql(
UPDATE pgq.job_rows SET progress = $3
 WHERE id = $1 AND attempt = $2 AND state = 'r' AND ($4 OR queue_id = ANY ($5)))sql",
                              5,
                              {INT8OID, INT4OID, JSONBOID, BOOLOID, INT4ARRAYOID},
                              nullptr};

}  // namespace

std::optional<TimestampTz> Extend(pg::SpiSession& spi, const Scope& scope, int64 id, int32 attempt,
                                  TimestampTz lease_until) {
  if (pg::job_ring::Lease lease; ring::Running(spi, scope, id, &lease)) {
    // Not held on the ring: maybe moved into pgq.job_rows meanwhile
    // (ring_jobs.h Running).
    if (auto extended = ring::Extend(spi, lease, id, attempt, lease_until)) return extended;
  }
  pg::Params params;
  params.Set(0, Int64GetDatum(id))
      .Set(1, Int32GetDatum(attempt))
      .Set(2, TimestampTzGetDatum(lease_until));
  internal::SetScope(params, 3, scope);
  const pg::Result extended = spi.Execute(extend_lease, params);
  if (extended.empty()) return std::nullopt;
  bool is_null = false;
  return DatumGetTimestampTz(extended.Value(0, "lease_until", &is_null));
}

bool Release(pg::SpiSession& spi, const Scope& scope, int64 id, int32 attempt) {
  if (pg::job_ring::Lease lease; ring::Running(spi, scope, id, &lease)) {
    // Not held on the ring: maybe moved into pgq.job_rows meanwhile.
    if (ring::GiveBack(spi, lease, id, attempt, std::nullopt, true)) return true;
  }
  pg::Params params;
  params.Set(0, Int64GetDatum(id)).Set(1, Int32GetDatum(attempt));
  internal::SetScope(params, 2, scope);
  const pg::Result released = spi.Execute(release_job, params);
  if (released.empty()) return false;
  internal::NotePendingAgain(released, true);
  return true;
}

bool Snooze(pg::SpiSession& spi, const Scope& scope, int64 id, int32 attempt, TimestampTz run_at,
            bool due_now) {
  if (pg::job_ring::Lease lease; ring::Running(spi, scope, id, &lease)) {
    // Not held on the ring: maybe moved into pgq.job_rows meanwhile.
    if (ring::GiveBack(spi, lease, id, attempt, run_at, due_now)) return true;
  }
  pg::Params params;
  params.Set(0, Int64GetDatum(id))
      .Set(1, Int32GetDatum(attempt))
      .Set(2, TimestampTzGetDatum(run_at));
  internal::SetScope(params, 3, scope);
  const pg::Result snoozed = spi.Execute(snooze_job, params);
  if (snoozed.empty()) return false;
  // Due later: no wake-up, but the hint must still come back to it (and a
  // capped queue has room again).
  internal::NotePendingAgain(snoozed, due_now);
  pg::ledger::NoteLeftRunning(snoozed.Int32(0, "queue_id"));
  return true;
}

bool SetProgress(pg::SpiSession& spi, const Scope& scope, int64 id, int32 attempt, Datum progress) {
  // Moved into pgq.job_rows first, where progress is kept; not held on
  // the ring, it may have been moved there meanwhile: the statement finds
  // it or nothing.
  if (pg::job_ring::Lease lease; ring::Running(spi, scope, id, &lease)) {
    (void)ring::MoveToTable(spi, lease, id, attempt, pg::Now());
  }
  pg::Params params;
  params.Set(0, Int64GetDatum(id)).Set(1, Int32GetDatum(attempt)).Set(2, progress);
  internal::SetScope(params, 3, scope);
  return spi.Execute(set_progress, params).size() == 1;
}

}  // namespace pgq::store
