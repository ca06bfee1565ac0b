// The end of a claim: complete, complete_many, fail, extend, release.
//
// Every one is a conditional write fenced by (id, attempt): a worker whose
// lease was lost to a newer claim changes nothing and is told so.
//
// A job whose lease expired is made pending again by maintenance, but keeps
// its attempt number and lease_until until someone claims it again. A late
// complete from the expired claim is still accepted in that window: the work
// was done, and running it again would be the duplicate we exist to avoid.
// A late fail is accepted too (its error is kept, its backoff applies).
#include "api/groups.h"
#include "api/job_sql.h"
#include "api/queue_ref.h"
#include "api/rights.h"
#include "core/backoff.h"
#include "core/validate.h"
#include "pg/ledger.h"
#include "pg/args.h"
#include "pg/settings.h"

namespace pgq::api {

namespace {

#define PGQ_STILL_HELD "(j.state = 'r' OR (j.state = 'p' AND j.lease_until IS NOT NULL))"

// One job. Returns one row (queue id, group key, was pending) if it
// completed the job; the completion is counted by the caller
// (CountFinished).
pg::Statement complete_job = {
    "DELETE FROM pgq.jobs j WHERE j.id = $1 AND j.attempt = $2 AND " PGQ_STILL_HELD
    "   AND ($3 OR j.queue_id = ANY ($4))"
    " RETURNING j.queue_id, j.group_key, j.state = 'p'",
    4,
    {INT8OID, INT4OID, BOOLOID, INT4ARRAYOID},
    nullptr};

pg::Statement insert_finished = {
    "INSERT INTO pgq.finished (queue_id, finished_at, jobs) VALUES ($1, $2, $3)",
    3,
    {INT4OID, TIMESTAMPTZOID, INT4OID},
    nullptr};

pg::Statement complete_jobs = {
    "WITH d AS ("
    "  DELETE FROM pgq.jobs j"
    "   USING ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2)) AS c(id, attempt)"
    "   WHERE j.id = c.id AND j.attempt = c.attempt AND " PGQ_STILL_HELD
    "     AND ($3 OR j.queue_id = ANY ($4))"
    "  RETURNING j.queue_id, j.group_key, j.state"
    ")" PGQ_COUNT_FINISHED,
    4,
    {INT8ARRAYOID, INT4ARRAYOID, BOOLOID, INT4ARRAYOID},
    nullptr};

pg::Statement backoff_of_job = {
    "SELECT q.backoff_base, q.backoff_max FROM pgq.jobs j JOIN pgq.queues q USING (queue_id) "
    " WHERE j.id = $1",
    1,
    {INT8OID},
    nullptr};

// Also accepted from an expired claim nobody has re-claimed yet, like a late
// complete: its error is recorded and the backoff applies.
pg::Statement fail_retry = {
    "UPDATE pgq.jobs j SET state = 'p', run_at = $3, lease_until = NULL, last_error = $4 "
    " WHERE j.id = $1 AND j.attempt = $2 AND j.attempt < j.max_attempts AND " PGQ_STILL_HELD
    "   AND ($5 OR j.queue_id = ANY ($6))"
    " RETURNING j.queue_id, j.priority, j.run_at, j.id",
    6,
    {INT8OID, INT4OID, TIMESTAMPTZOID, TEXTOID, BOOLOID, INT4ARRAYOID},
    nullptr};

pg::Statement fail_dead = {
    "WITH d AS ("
    "  DELETE FROM pgq.jobs WHERE id = $1 AND attempt = $2 AND state = 'r'"
    "     AND attempt >= max_attempts AND ($5 OR queue_id = ANY ($6))"
    "  RETURNING *"
    ") " PGQ_BURY_DELETED("$3", "exhausted", "$4"),
    6,
    {INT8OID, INT4OID, TEXTOID, TIMESTAMPTZOID, BOOLOID, INT4ARRAYOID},
    nullptr};

pg::Statement extend_lease = {
    "UPDATE pgq.jobs SET lease_until = $3 WHERE id = $1 AND attempt = $2 AND state = 'r' "
    "   AND ($4 OR queue_id = ANY ($5)) "
    "RETURNING lease_until, queue_id",
    5,
    {INT8OID, INT4OID, TIMESTAMPTZOID, BOOLOID, INT4ARRAYOID},
    nullptr};

// The next claim increments attempt again, so it carries the same number.
pg::Statement release_job = {
    "UPDATE pgq.jobs SET state = 'p', attempt = attempt - 1, lease_until = NULL "
    " WHERE id = $1 AND attempt = $2 AND state = 'r' AND ($3 OR queue_id = ANY ($4))"
    " RETURNING queue_id, priority, run_at, id",
    4,
    {INT8OID, INT4OID, BOOLOID, INT4ARRAYOID},
    nullptr};

struct Claim {
  int64 id;
  int32 attempt;
};

// A job made pending again by a statement that returned its queue_id,
// priority, run_at and id.
void NotePendingAgain(const pg::Result& pending, bool wake) {
  pg::ledger::NotePending(pending.Int32(0, "queue_id"), ClaimKeyOf(pending, 0), wake);
}

// What queue_stats.done_recent and the completions counter count: in shared
// memory when preloaded (flushed to pgq.finished by maintenance, one row per
// queue and pass), else one pgq.finished row.
void CountFinished(pg::SpiSession& spi, int32 queue_id, int32 jobs) {
  if (pg::ledger::NoteFinished(queue_id, static_cast<uint64>(jobs))) return;
  pg::Params params;
  params.Set(0, Int32GetDatum(queue_id))
      .Set(1, TimestampTzGetDatum(pg::Now()))
      .Set(2, Int32GetDatum(jobs));
  spi.Execute(insert_finished, params);
}

// Every function here takes a job by id: a role that may consume no queue
// is refused before anything is touched (42501); for one that may consume
// some, each statement finds only the jobs of the queues it may consume, so
// a job of another queue is answered as one that does not exist (false,
// 'lost', NULL) and tells it nothing (issue 15, L4).
QueueScope ConsumableQueues(pg::SpiSession& spi) {
  RequireRightSomewhere(spi, core::kConsume);
  return QueuesWithRight(spi, core::kConsume);
}

// An int4[] column of a result's first row, empty when NULL.
std::vector<int32> Int32Array(const pg::Result& result, int column) {
  std::vector<int32> values;
  bool is_null = false;
  const Datum array = result.Value(0, column, &is_null);
  if (is_null) return values;
  Datum* elements = nullptr;
  int count = 0;
  pg::Guard([&] {
    deconstruct_array(DatumGetArrayTypeP(array), INT4OID, sizeof(int32), true, TYPALIGN_INT,
                      &elements, nullptr, &count);
  });
  values.reserve(count);
  for (int i = 0; i < count; ++i) values.push_back(DatumGetInt32(elements[i]));
  return values;
}

// complete_many's statement returned the ids of the queues it finished jobs
// of in column 5, and how many of each in column 6.
void CountResultCompletions(pg::SpiSession& spi, const pg::Result& completed) {
  const std::vector<int32> queue_ids = Int32Array(completed, 5);
  const std::vector<int32> jobs = Int32Array(completed, 6);
  for (size_t i = 0; i < queue_ids.size(); ++i) CountFinished(spi, queue_ids[i], jobs[i]);
}

Claim ClaimArgs(FunctionCallInfo fcinfo) {
  return Claim{pg::RequiredInt64(fcinfo, 0, "id"), pg::RequiredInt32(fcinfo, 1, "attempt")};
}

int64 NextRetryDelay(pg::SpiSession& spi, const Claim& claim) {
  pg::Params params;
  params.Set(0, Int64GetDatum(claim.id));
  const pg::Result queue = spi.Execute(backoff_of_job, params, 1);
  if (queue.empty()) return 0;  // gone: the writes will say 'lost'
  bool is_null = false;
  const core::BackoffPolicy policy{
      pg::IntervalMicros(DatumGetIntervalP(queue.Value(0, 1, &is_null)), "backoff_base"),
      pg::IntervalMicros(DatumGetIntervalP(queue.Value(0, 2, &is_null)), "backoff_max")};
  return core::BackoffDelay(policy, claim.attempt, pg_prng_double(&pg_global_prng_state));
}

}  // namespace

}  // namespace pgq::api

using namespace pgq;

// complete(id, attempt) returns boolean
PGQ_FUNCTION(pgq_complete) {
  const api::Claim claim = api::ClaimArgs(fcinfo);
  pg::SpiSession spi;
  const api::QueueScope scope = api::ConsumableQueues(spi);
  pg::Params params;
  params.Set(0, Int64GetDatum(claim.id)).Set(1, Int32GetDatum(claim.attempt));
  api::SetScope(params, 2, scope);
  const pg::Result completed = spi.Execute(api::complete_job, params);
  if (completed.empty()) PG_RETURN_BOOL(false);
  const int32 queue_id = completed.Int32(0, 1);
  if (completed.Bool(0, 3)) pg::ledger::NoteLocked(queue_id);  // an expired lease's late complete
  if (!completed.IsNull(0, "group_key")) api::MoveGroupsOn(spi, api::GroupsOfResult(completed));
  api::CountFinished(spi, queue_id, 1);
  PG_RETURN_BOOL(true);
}

// complete_many(ids, attempts) returns integer
PGQ_FUNCTION(pgq_complete_many) {
  if (pg::ArgIsNull(fcinfo, 0)) pg::Raise(ERRCODE_NULL_VALUE_NOT_ALLOWED, "ids must not be null");
  if (pg::ArgIsNull(fcinfo, 1)) {
    pg::Raise(ERRCODE_NULL_VALUE_NOT_ALLOWED, "attempts must not be null");
  }
  ArrayType* ids = pg::Guard([&] { return PG_GETARG_ARRAYTYPE_P(0); });
  ArrayType* attempts = pg::Guard([&] { return PG_GETARG_ARRAYTYPE_P(1); });
  if (ARR_NDIM(ids) > 1 || ARR_NDIM(attempts) > 1) {
    pg::Raise(ERRCODE_ARRAY_SUBSCRIPT_ERROR, "ids and attempts must be one-dimensional arrays");
  }
  const int count = pg::Guard([&] { return ArrayGetNItems(ARR_NDIM(ids), ARR_DIMS(ids)); });
  const int attempt_count =
      pg::Guard([&] { return ArrayGetNItems(ARR_NDIM(attempts), ARR_DIMS(attempts)); });
  if (count != attempt_count) {
    pg::Raise(ERRCODE_ARRAY_SUBSCRIPT_ERROR, "ids and attempts must have the same length");
  }
  if (array_contains_nulls(ids) || array_contains_nulls(attempts)) {
    pg::Raise(ERRCODE_NULL_VALUE_NOT_ALLOWED, "ids and attempts must not contain nulls");
  }
  pg::SpiSession spi;
  const api::QueueScope scope = api::ConsumableQueues(spi);
  if (count == 0) PG_RETURN_INT32(0);
  pg::Params params;
  params.Set(0, PointerGetDatum(ids)).Set(1, PointerGetDatum(attempts));
  api::SetScope(params, 2, scope);
  const pg::Result result = spi.Execute(api::complete_jobs, params);
  api::CountResultCompletions(spi, result);
  const int32 completed = static_cast<int32>(result.Int64(0, 1));
  for (uint64 row = 0; row < result.size(); ++row) {
    if (result.Bool(row, 4)) pg::ledger::NoteLocked(result.Int32(row, 2));
  }
  std::vector<api::GroupRef> groups = api::GroupsOfResult(result);
  if (!groups.empty()) api::MoveGroupsOn(spi, std::move(groups));
  PG_RETURN_INT32(completed);
}

// fail(id, attempt, error, retry_in) returns 'retry', 'dead' or 'lost'
PGQ_FUNCTION(pgq_fail) {
  const api::Claim claim = api::ClaimArgs(fcinfo);
  // Bounded: an error text is kept with the job and shown in dead-letter.
  const Datum error = pg::BoundedTextArg(fcinfo, 2, core::kMaxErrorTextBytes);
  const bool has_error = !pg::ArgIsNull(fcinfo, 2);
  const bool has_retry_in = !pg::ArgIsNull(fcinfo, 3);
  int64 retry_in_us = 0;
  if (has_retry_in) {
    retry_in_us = pg::IntervalMicros(PG_GETARG_INTERVAL_P(3), "retry_in");
    if (retry_in_us < 0) {
      pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE, "retry_in must not be negative");
    }
  }

  const char* outcome = "lost";
  {
    pg::SpiSession spi;
    const api::QueueScope scope = api::ConsumableQueues(spi);
    const TimestampTz now = pg::Now();
    const int64 delay_us = has_retry_in ? retry_in_us : api::NextRetryDelay(spi, claim);

    pg::Params retry;
    retry.Set(0, Int64GetDatum(claim.id))
        .Set(1, Int32GetDatum(claim.attempt))
        .Set(2, TimestampTzGetDatum(pg::AddMicros(now, delay_us, "retry_in")))
        .SetOptional(3, !has_error, error);
    api::SetScope(retry, 4, scope);
    if (const pg::Result retried = spi.Execute(api::fail_retry, retry); retried.size() == 1) {
      pg::ledger::NoteCount(retried.Int32(0, 1), pg::kFailures, 1);
      outcome = "retry";
      // Due later: no wake-up now, but the claim hint must still come back
      // to it (it may come before jobs already passed, core/claim_hint.h).
      api::NotePendingAgain(retried, delay_us == 0);
      pg::ledger::NoteLocked(retried.Int32(0, 1));  // it may have locked a pending job
    } else {
      pg::Params dead;
      dead.Set(0, Int64GetDatum(claim.id))
          .Set(1, Int32GetDatum(claim.attempt))
          .SetOptional(2, !has_error, error)
          .Set(3, TimestampTzGetDatum(now));
      api::SetScope(dead, 4, scope);
      if (const pg::Result buried = spi.Execute(api::fail_dead, dead); buried.size() == 1) {
        pg::ledger::NoteCount(buried.Int32(0, 1), pg::kFailures, 1);
        pg::ledger::NoteCount(buried.Int32(0, 1), pg::kDeadLettered, 1);
        outcome = "dead";
        api::MoveGroupsOn(spi, api::GroupsOfResult(buried));
      }
    }
  }
  // After SPI_finish: a result allocated while connected would be freed with
  // SPI's memory context.
  return pg::TextDatum(outcome);
}

// extend(id, attempt, lease) returns the new lease_until, or NULL
PGQ_FUNCTION(pgq_extend) {
  const api::Claim claim = api::ClaimArgs(fcinfo);
  const int64 lease_us = pg::RequiredIntervalMicros(fcinfo, 2, "lease");
  pg::CheckLeaseValue(lease_us, "lease");
  pg::SpiSession spi;
  const api::QueueScope scope = api::ConsumableQueues(spi);
  pg::Params params;
  params.Set(0, Int64GetDatum(claim.id))
      .Set(1, Int32GetDatum(claim.attempt))
      .Set(2, TimestampTzGetDatum(pg::AddMicros(pg::Now(), lease_us, "lease")));
  api::SetScope(params, 3, scope);
  const pg::Result extended = spi.Execute(api::extend_lease, params);
  if (extended.empty()) PG_RETURN_NULL();
  bool is_null = false;
  PG_RETURN_DATUM(extended.Value(0, 1, &is_null));
}

// release(id, attempt) returns boolean
PGQ_FUNCTION(pgq_release) {
  const api::Claim claim = api::ClaimArgs(fcinfo);
  pg::SpiSession spi;
  const api::QueueScope scope = api::ConsumableQueues(spi);
  pg::Params params;
  params.Set(0, Int64GetDatum(claim.id)).Set(1, Int32GetDatum(claim.attempt));
  api::SetScope(params, 2, scope);
  const pg::Result released = spi.Execute(api::release_job, params);
  if (released.empty()) PG_RETURN_BOOL(false);
  api::NotePendingAgain(released, true);
  PG_RETURN_BOOL(true);
}
