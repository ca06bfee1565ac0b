// A backend-local cache of queue ids and settings by name, so that a single
// enqueue costs one statement instead of two.
//
// Correctness does not rest on the cache being fresh: callers take the
// queue's lock, then call StillAt(), which processes pending invalidation
// messages. Every change of pgq.queues' rows announces itself
// (pg/invalidation.h: a relcache invalidation of pgq.queues at commit), and
// a committing transaction sends its invalidations before it releases its
// locks, so once we hold the queue lock any drop or change that committed
// before is visible to us as a changed epoch. The cache depends on pgq.queues
// only: other invalidations leave it alone. Claims take no lock; they process
// pending invalidations before each try, so a pause, resume, change or drop
// committed before that is seen.
#pragma once

#include "pg/pg.h"

namespace pgq::pg {

struct CachedQueue {
  int32 id;
  int32 max_attempts;
  bool notify;
  bool paused;
  Interval lease;
  double rate_limit;             // claims per second; 0: no limit
  bool dedupe_periods;           // 1.2: some job was enqueued with a dedupe_for
  int32 max_running;             // 1.2: 0: no cap
  int32 group_concurrency;       // 1.2: jobs of one FIFO group running at once (1 before)
  int32 ring_id = 0;             // 3.0: its plain jobs are on this ring (ADR 0028); 0: none
  bool keeps_history = false;    // keep_completed > 0
  bool dedupe_replaces = false;  // 3.0: some enqueue had on_duplicate => 'replace'
  int32 max_pending = 0;         // 3.1: unfinished jobs producers may not pass; 0: none
};

class QueueCache {
 public:
  // False on a miss, and when an invalidation of pgq.queues was processed
  // since the cache was filled (it is emptied then).
  static bool Find(std::string_view name, CachedQueue* queue);

  // The epoch of pgq.queues, read before looking a queue up.
  static uint64 Begin();
  // Keeps `queue` unless an invalidation of pgq.queues was processed since
  // `begun` (the look-up may have read the row before that change).
  static void Remember(std::string_view name, const CachedQueue& queue, uint64 begun);

  // Processes pending invalidation messages; false if one of pgq.queues
  // arrived since `begun` (the caller must look the queue up again).
  static bool StillAt(uint64 begun);
};

}  // namespace pgq::pg
