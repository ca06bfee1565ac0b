// A backend-local cache of queue ids and settings by name, so that a single
// enqueue costs one statement instead of two.
//
// Correctness does not rest on the cache being fresh: callers take the
// queue's lock, then call Revalidate(), which processes pending invalidation
// messages. alter_queue and drop_queue send a relcache invalidation for
// pgq.queues, and a committing transaction sends its invalidations before it
// releases its locks, so once we hold the queue lock any drop or change that
// committed before is visible to us as an emptied cache. The cache is also
// emptied by every other relcache invalidation (cheap: it refills with one
// lookup per queue). Claims take no lock; they call Revalidate() before each
// try, so a pause, resume, change or drop committed before that is seen.
#pragma once

#include "pg/pg.h"

namespace pgq::pg {

struct CachedQueue {
  int32 id;
  int32 max_attempts;
  bool notify;
  bool paused;
  Interval lease;
  double rate_limit;        // claims per second; 0: no limit
  bool dedupe_periods;      // 1.2: some job was enqueued with a dedupe_for
  int32 max_running;        // 1.2: 0: no cap
  int32 group_concurrency;  // 1.2: jobs of one FIFO group running at once (1 before)
};

class QueueCache {
 public:
  // Registers the invalidation callback; called once per backend from _PG_init.
  static void Register();

  static bool Find(std::string_view name, CachedQueue* queue);
  static void Remember(std::string_view name, const CachedQueue& queue);

  // Processes pending invalidation messages; false if that emptied the cache
  // since `generation` was read (the caller must look the queue up again).
  static bool Revalidate(uint64 generation);
  // Bumped by every relcache invalidation and every change of a role or a
  // role membership: what is kept per generation (the rights lists and
  // answers of api/rights.h) is reloaded after either.
  static uint64 Generation();

  // Tells every backend (at commit) and this one (at the next command) that
  // queue settings changed.
  static void InvalidateAll();
};

}  // namespace pgq::pg
