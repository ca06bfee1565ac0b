// One invalidation service for the backend caches (ADR 0027).
//
// A backend keeps a few things across statements: queues by name
// (pg/queue_cache.h), streams and their rings by name (store/streams.cpp),
// the holders of queue and stream rights (service/rights.cpp,
// service/stream_rights.cpp), the owner of pgq's tables (pg/spi.cpp), the
// installed catalog (store/catalog.cpp), the history target
// (store/history.cpp). Each says what it is built from, as a set of
// sources, and keeps a CacheEpoch of them: it is valid until an
// invalidation of one of its sources is processed, and only such an
// invalidation empties it (an autovacuum of pgq.job_rows, a TRUNCATE of a
// segment or a temporary table of some session no longer empties the
// queue cache of every backend).
//
// The sources are told apart by PostgreSQL's own invalidation messages,
// whose callbacks are registered here and nowhere else (test_layers.py):
// a relcache invalidation of one of our catalog tables (sent by DDL on it,
// and by Announce, which the functions that change its rows call), or a
// syscache invalidation of roles, role memberships or schemas.
//
// INVARIANT (never stale): an invalidation that cannot be told apart counts
// for every source: a relcache reset, and a relation this backend cannot
// name while the relation ids of our tables are unknown (never resolved, a
// schema changed, one of them was invalidated and may have been dropped and
// created again, one of them is missing). A cache may be emptied too often,
// never too rarely. Pending messages are processed at the start of each
// transaction, when a lock is taken, and by Accept().
#pragma once

#include "pg/pg.h"

namespace pgq::pg {

namespace invalidation {

// What a cache may be built from; a cache depends on a set of them (bits).
enum Source : uint32 {
  kQueues = 1u << 0,        // pgq.queues: settings, pause, owners
  kQueueGrants = 1u << 1,   // pgq.grants
  kStreams = 1u << 2,       // pgq.streams (and the event id sequence)
  kStreamGrants = 1u << 3,  // pgq.stream_grants
  kRings = 1u << 4,         // pgq.rings: a ring turned (pg/segments.h)
  kRoles = 1u << 5,         // roles and memberships: superuser, privileges of
  kSchema = 1u << 6,        // pg_namespace: schema pgq and its owner
  kAnyRelation = 1u << 7,   // any relation's definition: the installed catalog
};
inline constexpr int kSourceCount = 8;

namespace detail {
// INVARIANT: only the callbacks of invalidation.cpp write these, and only
// by incrementing them.
extern uint64 counters[kSourceCount];
}  // namespace detail

// Registers the callbacks; once per backend, from _PG_init.
void Register();

// Processes pending invalidation messages.
void Accept();

// Tells every backend (at commit) that the rows behind `source` changed: a
// relcache invalidation of its table; this backend's caches that depend on
// it forget at once. For kQueues, kQueueGrants, kStreams, kStreamGrants and
// kRings.
void Announce(Source source);

// Resolves the relation ids of our tables if they are unknown (catalog
// lookups: inside a transaction, never from a callback).
void ResolveIfStale();

// A number that changes whenever an invalidation of one of `sources` is
// processed: the sum of their counters (each only grows). One load and add
// per source (a cache has one to three); the compare of the hot paths.
inline uint64 Epoch(uint32 sources) {
  uint64 sum = 0;
  for (; sources != 0; sources &= sources - 1) sum += detail::counters[__builtin_ctz(sources)];
  return sum;
}

}  // namespace invalidation

// A cache's validity: what it depends on, and the epoch it was loaded at.
// constexpr-constructed, so it may be a namespace-scope or static object.
class CacheEpoch {
 public:
  constexpr explicit CacheEpoch(uint32 sources) : sources_(sources) {}

  // True while no invalidation of the sources was processed since Mark.
  bool Valid() const { return marked_ && seen_ == Current(); }
  uint64 Current() const { return invalidation::Epoch(sources_); }

  // Read before loading what the cache keeps, and passed to Mark once it is
  // loaded whole: an invalidation processed during the load (statements
  // process them) makes the next Valid() false, so it is loaded again.
  uint64 Begin() const {
    invalidation::ResolveIfStale();
    return Current();
  }
  void Mark(uint64 begun) {
    seen_ = begun;
    marked_ = true;
  }
  void Clear() { marked_ = false; }

  // Processes pending invalidations; true if none of the sources changed
  // since `begun` (from Begin or Current). For a caller that took a lock.
  bool StillAt(uint64 begun) const {
    invalidation::Accept();
    return begun == Current();
  }

 private:
  uint32 sources_;
  uint64 seen_ = 0;
  bool marked_ = false;
};

}  // namespace pgq::pg
