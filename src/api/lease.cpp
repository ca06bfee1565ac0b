// A claim's lease: extend keeps it, release gives the job back without
// counting the attempt, snooze gives it back for later ("not now"),
// progress reports how far it got. Fenced by (id, attempt) like the end of
// a claim (api/finish.cpp); the statements are the jobs store's
// (store/lease.cpp).
#include "api/claim_id.h"
#include "service/rights.h"
#include "pg/args.h"
#include "pg/settings.h"
#include "store/jobs.h"

using namespace pgq;

// extend(id, attempt, lease) returns the new lease_until, or NULL
PGQ_FUNCTION(pgq_extend) {
  const api::ClaimId claim = api::ClaimIdArgs(fcinfo);
  const int64 lease_us = pg::RequiredIntervalMicros(fcinfo, 2, "lease");
  pg::CheckLeaseValue(lease_us, "lease");
  pg::SpiSession spi;
  const store::Scope scope = service::RequireScope(spi, core::kConsume);
  const std::optional<TimestampTz> until = store::Extend(
      spi, scope, claim.id, claim.attempt, pg::AddMicros(pg::Now(), lease_us, "lease"));
  if (!until) PG_RETURN_NULL();
  PG_RETURN_TIMESTAMPTZ(*until);
}

// release(id, attempt) returns boolean
PGQ_FUNCTION(pgq_release) {
  const api::ClaimId claim = api::ClaimIdArgs(fcinfo);
  pg::SpiSession spi;
  const store::Scope scope = service::RequireScope(spi, core::kConsume);
  PG_RETURN_BOOL(store::Release(spi, scope, claim.id, claim.attempt));
}

// snooze(id, attempt, delay) returns boolean
PGQ_FUNCTION(pgq_snooze) {
  const api::ClaimId claim = api::ClaimIdArgs(fcinfo);
  const int64 delay_us = pg::RequiredSpanMicros(fcinfo, 2, "delay");
  pg::SpiSession spi;
  const store::Scope scope = service::RequireScope(spi, core::kConsume);
  PG_RETURN_BOOL(store::Snooze(spi, scope, claim.id, claim.attempt,
                               pg::AddMicros(pg::Now(), delay_us, "delay"), delay_us == 0));
}

// progress(id, attempt, progress) returns boolean
PGQ_FUNCTION(pgq_progress) {
  const api::ClaimId claim = api::ClaimIdArgs(fcinfo);
  if (pg::ArgIsNull(fcinfo, 2)) {
    pg::Raise(ERRCODE_NULL_VALUE_NOT_ALLOWED, "progress must not be null");
  }
  const Datum progress = PG_GETARG_DATUM(2);
  pg::CheckJsonSize(progress, "progress");
  pg::SpiSession spi;
  const store::Scope scope = service::RequireScope(spi, core::kConsume);
  PG_RETURN_BOOL(store::SetProgress(spi, scope, claim.id, claim.attempt, progress));
}
