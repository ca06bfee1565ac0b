#include "pg/catalog_version.h"

#include <cstdio>

#include "core/version.h"
#include "pg/boundary.h"
#include "pg/invalidation.h"

extern "C" {
#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/indexing.h"
#include "catalog/pg_extension.h"
#include "commands/dbcommands.h"
#include "commands/extension.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
}

#ifndef PGQ_VERSION
#error "PGQ_VERSION (the control file's default_version) is set by the Makefile"
#endif

namespace pgq::pg {

namespace {

// "current" until a relation or a schema changes (see CheckCatalog).
CacheEpoch current_kept{invalidation::kAnyRelation | invalidation::kSchema};

// Whether a worker of this process last logged that it waits.
bool worker_waiting = false;

struct Installed {
  bool found;
  Oid oid;
  char version[64];
};

// INVARIANT: runs inside Guard; no C++ object with a destructor.
void ReadInstalled(Installed* out) {
  Relation relation = table_open(ExtensionRelationId, AccessShareLock);
  ScanKeyData key;
  ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber, F_NAMEEQ,
              CStringGetDatum("pgq_cpp"));
  SysScanDesc scan = systable_beginscan(relation, ExtensionNameIndexId, true, nullptr, 1, &key);
  HeapTuple tuple = systable_getnext(scan);
  if (HeapTupleIsValid(tuple)) {
    out->found = true;
    out->oid = reinterpret_cast<Form_pg_extension>(GETSTRUCT(tuple))->oid;
    bool is_null = true;
    const Datum version =
        heap_getattr(tuple, Anum_pg_extension_extversion, RelationGetDescr(relation), &is_null);
    if (!is_null) {
      char* copy = text_to_cstring(DatumGetTextPP(version));
      strlcpy(out->version, copy, sizeof(out->version));
      pfree(copy);
    }
  }
  systable_endscan(scan);
  table_close(relation, AccessShareLock);
}

}  // namespace

const char* LibraryVersion() { return PGQ_VERSION; }

CatalogCheck CheckCatalog() {
  CatalogCheck check{CatalogCheck::State::kCurrent, ""};
  if (current_kept.Valid()) {
    strlcpy(check.installed, PGQ_VERSION, sizeof(check.installed));
    return check;
  }
  current_kept.Clear();
  const uint64 begun = current_kept.Begin();
  Installed installed{false, InvalidOid, ""};
  Guard([&installed] { ReadInstalled(&installed); });
  strlcpy(check.installed, installed.version, sizeof(check.installed));
  if (!installed.found) {
    check.state = CatalogCheck::State::kNotInstalled;
    return check;
  }
  const int order = core::CompareVersions(installed.version, PGQ_VERSION);
  if (order == 0) {
    current_kept.Mark(begun);
    return check;
  }
  // pgq_cpp's own script (CREATE EXTENSION of an older release, or a step
  // of ALTER EXTENSION UPDATE, which sets extversion to each step's target
  // before running it) may call our functions on the catalog it builds.
  if (creating_extension && CurrentExtensionObject == installed.oid) return check;
  check.state = order < 0 ? CatalogCheck::State::kOlder : CatalogCheck::State::kNewer;
  return check;
}

void RequireCurrentCatalog() {
  if (IsBinaryUpgrade) return;
  const CatalogCheck check = CheckCatalog();
  if (check.state == CatalogCheck::State::kOlder) {
    Raise(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
          std::string("pgq_cpp ") + check.installed +
              " is installed in this database, older than the loaded library " + PGQ_VERSION,
          "The library serves only a catalog of its own version; the functions of pgq_cpp "
          "refuse to run until the extension is updated.",
          "Run ALTER EXTENSION pgq_cpp UPDATE in this database.");
  }
  if (check.state == CatalogCheck::State::kNewer) {
    Raise(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
          std::string("pgq_cpp ") + check.installed +
              " is installed in this database, newer than the loaded library " + PGQ_VERSION,
          "The library serves only a catalog of its own version.",
          std::string("Install the pgq_cpp ") + check.installed +
              " library and reconnect (restart the server when pgq_cpp is in "
              "shared_preload_libraries).");
  }
}

bool CatalogIsCurrent(const char* worker) {
  CatalogCheck check{CatalogCheck::State::kCurrent, ""};
  AtBoundary([&check] { check = CheckCatalog(); });
  const bool usable = check.state == CatalogCheck::State::kCurrent ||
                      check.state == CatalogCheck::State::kNotInstalled;
  if (!usable && !worker_waiting) {
    const char* database = get_database_name(MyDatabaseId);
    if (check.state == CatalogCheck::State::kOlder) {
      ereport(LOG, (errmsg("%s waits for ALTER EXTENSION pgq_cpp UPDATE: pgq_cpp %s is "
                           "installed in database \"%s\", the library is %s",
                           worker, check.installed, database, PGQ_VERSION),
                    errhint("Run ALTER EXTENSION pgq_cpp UPDATE in this database.")));
    } else {
      ereport(LOG, (errmsg("%s waits: pgq_cpp %s is installed in database \"%s\", newer than "
                           "the library %s",
                           worker, check.installed, database, PGQ_VERSION),
                    errhint("Restart the server to load the installed library.")));
    }
  } else if (usable && worker_waiting) {
    ereport(LOG, (errmsg("%s resumes: pgq_cpp %s is installed in database \"%s\"", worker,
                         check.installed, get_database_name(MyDatabaseId))));
  }
  worker_waiting = !usable;
  return usable;
}

}  // namespace pgq::pg
