#include "pg/invalidation.h"

#include <cstring>

#include "pg/boundary.h"

extern "C" {
#include "catalog/namespace.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
}

namespace pgq::pg::invalidation {

namespace detail {
uint64 counters[kSourceCount] = {};
}  // namespace detail

namespace {

// Our tables whose relcache invalidations stand for a source. A table an
// older catalog lacks leaves the map incomplete (see `complete`).
struct Watched {
  const char* table;
  Source source;
};
constexpr Watched kWatched[] = {
    {"queues", kQueues}, {"grants", kQueueGrants},         {"streams", kStreams},
    {"rings", kRings},   {"stream_grants", kStreamGrants}, {"stream_event_id_seq", kStreams},
};
constexpr int kWatchedCount = sizeof(kWatched) / sizeof(kWatched[0]);

// The relation ids of kWatched as last resolved, and the syscache hash of
// schema pgq's row. INVARIANT: read by the callbacks, written only by
// ResolveIfStale; `complete` (every table found, no invalidation processed
// while looking) is what lets a callback ignore a relation it cannot name.
Oid relids[kWatchedCount] = {};
uint32 schema_hash = 0;
bool complete = false;
bool stale = true;  // resolve at the next Begin

int IndexOf(Source source) {
  for (int i = 0; i < kSourceCount; ++i) {
    if (source == (1u << i)) return i;
  }
  return 0;
}

void Bump(Source source) { ++detail::counters[IndexOf(source)]; }

void BumpAll() {
  for (uint64& counter : detail::counters) ++counter;
}

// One of our tables may have been dropped and created again, or the schema
// changed: relation ids are unknown until resolved again.
void Unresolve() {
  stale = true;
  complete = false;
}

// Callbacks: they only count (no allocation, no catalog access, cannot fail).
void OnRelcacheInvalidation(Datum, Oid relid) {
  Bump(kAnyRelation);
  if (OidIsValid(relid)) {
    for (int i = 0; i < kWatchedCount; ++i) {
      if (relids[i] != relid) continue;
      Bump(kWatched[i].source);
      Unresolve();
      return;
    }
    if (complete) return;  // not one of ours
  }
  BumpAll();  // a reset, or a relation that might be one of ours
  Unresolve();
}

void OnRoleInvalidation(Datum, int, uint32) { Bump(kRoles); }

void OnSchemaInvalidation(Datum, int, uint32 hash) {
  if (complete && hash != 0 && hash != schema_hash) return;  // another schema
  Bump(kSchema);
  Unresolve();
}

const char* TableOf(Source source) {
  for (const Watched& watched : kWatched) {
    if (watched.source == source) return watched.table;
  }
  return nullptr;
}

}  // namespace

void Register() {
  CacheRegisterRelcacheCallback(OnRelcacheInvalidation, 0);
  CacheRegisterSyscacheCallback(AUTHOID, OnRoleInvalidation, 0);
  CacheRegisterSyscacheCallback(AUTHMEMROLEMEM, OnRoleInvalidation, 0);
  CacheRegisterSyscacheCallback(NAMESPACEOID, OnSchemaInvalidation, 0);
}

void Accept() {
  Guard([] { AcceptInvalidationMessages(); });
}

void Announce(Source source) {
  const char* table = TableOf(source);
  if (table == nullptr) return;
  Guard([table] {
    const Oid schema = get_namespace_oid("pgq", false);
    const Oid relid = get_relname_relid(table, schema);
    if (OidIsValid(relid)) CacheInvalidateRelcacheByRelid(relid);
  });
  // This backend's own caches forget it now, not at the next command: a
  // later call in the same statement (drop_stream twice in one SELECT)
  // must not find what this one dropped. Needless after a rollback, never
  // wrong.
  Bump(source);
}

void ResolveIfStale() {
  if (!stale) return;
  // Conservative while looking: an invalidation processed by the lookups
  // sets `stale` again and keeps `complete` false.
  complete = false;
  stale = false;
  Oid found[kWatchedCount] = {};
  uint32 hash = 0;
  bool all = false;
  try {
    Guard([&] {
      const Oid schema = get_namespace_oid("pgq", true);
      if (!OidIsValid(schema)) return;
      hash = GetSysCacheHashValue1(NAMESPACEOID, ObjectIdGetDatum(schema));
      all = true;
      for (int i = 0; i < kWatchedCount; ++i) {
        found[i] = get_relname_relid(kWatched[i].table, schema);
        all = all && OidIsValid(found[i]);
      }
    });
  } catch (...) {
    stale = true;
    throw;
  }
  std::memcpy(relids, found, sizeof(relids));
  schema_hash = hash;
  if (!stale) complete = all;
}

}  // namespace pgq::pg::invalidation
