// The end of a claim: complete (with a result kept in the queue's history),
// complete_many, fail. The statements, their fencing by (id, attempt) and
// what each notes for commit are the jobs store's (store/finish.cpp).
//
// Every function here takes a job by id: a role that may consume no queue
// is refused before anything is touched (42501); for one that may consume
// some, each statement finds only the jobs of the queues it may consume, so
// a job of another queue is answered as one that does not exist (false,
// 'lost') and tells it nothing (issue 15, L4).
#include "api/claim_id.h"
#include "service/rights.h"
#include "core/validate.h"
#include "pg/args.h"
#include "pg/settings.h"
#include "store/jobs.h"

using namespace pgq;

// complete(id, attempt, result) returns boolean
PGQ_FUNCTION(pgq_complete) {
  const api::ClaimId claim = api::ClaimIdArgs(fcinfo);
  const bool has_result = !pg::ArgIsNull(fcinfo, 2);
  const Datum result = has_result ? PG_GETARG_DATUM(2) : 0;
  if (has_result) pg::CheckJsonSize(result, "result");
  pg::SpiSession spi;
  const store::Scope scope = service::RequireScope(spi, core::kConsume);
  PG_RETURN_BOOL(store::Complete(spi, scope, claim.id, claim.attempt, result, pg::Now()));
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
  const store::Scope scope = service::RequireScope(spi, core::kConsume);
  if (count == 0) PG_RETURN_INT32(0);
  if (count == 1) {
    // One job: complete's own statement, the cheapest there is (a single
    // DELETE by primary key), with the same fencing and side effects as a
    // batch (issue 31: workers that complete what they claimed one at a
    // time pay no more than complete).
    const int64 id = *reinterpret_cast<const int64*>(ARR_DATA_PTR(ids));
    const int32 attempt = *reinterpret_cast<const int32*>(ARR_DATA_PTR(attempts));
    PG_RETURN_INT32(store::Complete(spi, scope, id, attempt, 0, pg::Now()) ? 1 : 0);
  }
  PG_RETURN_INT32(
      store::CompleteMany(spi, scope, PointerGetDatum(ids), PointerGetDatum(attempts), pg::Now()));
}

// fail(id, attempt, error, retry_in) returns 'retry', 'dead' or 'lost'
PGQ_FUNCTION(pgq_fail) {
  const api::ClaimId claim = api::ClaimIdArgs(fcinfo);
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

  store::FailOutcome outcome;
  {
    pg::SpiSession spi;
    const store::Scope scope = service::RequireScope(spi, core::kConsume);
    outcome =
        store::Fail(spi, scope, claim.id, claim.attempt, has_error ? error : 0,
                    has_retry_in ? std::optional<int64>(retry_in_us) : std::nullopt, pg::Now());
  }
  // After SPI_finish: a result allocated while connected would be freed with
  // SPI's memory context.
  switch (outcome) {
    case store::FailOutcome::kRetry:
      return pg::TextDatum("retry");
    case store::FailOutcome::kDead:
      return pg::TextDatum("dead");
    case store::FailOutcome::kLost:
      break;
  }
  return pg::TextDatum("lost");
}
