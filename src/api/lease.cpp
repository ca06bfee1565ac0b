// A claim's lease: extend keeps it, release gives the job back without
// counting the attempt. Fenced by (id, attempt) like the end of a claim
// (api/finish.cpp); the statements are the jobs store's (store/lease.cpp).
#include "api/claim.h"
#include "api/rights.h"
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
  const store::Scope scope = api::RequireScope(spi, core::kConsume);
  const std::optional<TimestampTz> until = store::Extend(
      spi, scope, claim.id, claim.attempt, pg::AddMicros(pg::Now(), lease_us, "lease"));
  if (!until) PG_RETURN_NULL();
  PG_RETURN_TIMESTAMPTZ(*until);
}

// release(id, attempt) returns boolean
PGQ_FUNCTION(pgq_release) {
  const api::ClaimId claim = api::ClaimIdArgs(fcinfo);
  pg::SpiSession spi;
  const store::Scope scope = api::RequireScope(spi, core::kConsume);
  PG_RETURN_BOOL(store::Release(spi, scope, claim.id, claim.attempt));
}
