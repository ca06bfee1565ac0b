// Library entry point: _PG_init, above the zones (src/core, pg, api, bgw),
// so that none of them includes a higher one.
#include "bgw/bgw.h"
#include "pg/job_ring.h"
#include "pg/ledger.h"
#include "pg/invalidation.h"
#include "pg/settings.h"
#include "pg/shared.h"

#ifdef PGQ_RINGS_PROTO
namespace pgq::proto {
void RequestRingShmem();  // bench/proto/rings.cpp (issue 33's prototype)
}
#endif

extern "C" {
PG_MODULE_MAGIC;

PGDLLEXPORT void _PG_init(void);

void _PG_init(void) {
  // pg_upgrade loads every library to check it; do nothing there.
  if (IsBinaryUpgrade) return;
  pgq::pg::DefineSettings();
  pgq::pg::invalidation::Register();
  // Shared memory, claim wake-ups and the workers exist only when the
  // postmaster loads us; a backend that loads us on first use works without
  // them (claim's wait polls, maintenance is pgq.maintain()).
  if (!process_shared_preload_libraries_in_progress) return;
  pgq::pg::RequestSharedState();
  pgq::pg::job_ring::RequestShmem();
#ifdef PGQ_RINGS_PROTO
  pgq::proto::RequestRingShmem();
#endif
  pgq::pg::ledger::Register();
  pgq::bgw::InstallDatabaseHooks();
  pgq::bgw::RegisterLauncher();
}
}
