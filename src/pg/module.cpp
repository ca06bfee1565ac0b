// Library entry point.
#include "pg/queue_cache.h"
#include "pg/settings.h"

extern "C" {
PG_MODULE_MAGIC;

PGDLLEXPORT void _PG_init(void);

void _PG_init(void) {
  // pg_upgrade loads every library to check it; do nothing there.
  if (IsBinaryUpgrade) return;
  pgq::pg::DefineSettings();
  pgq::pg::QueueCache::Register();
}
}
