// Looking a queue up by name, shared by every function that takes one.
#pragma once

#include "core/claim_hint.h"
#include "pg/queue_cache.h"
#include "pg/spi.h"

namespace pgq::api {

struct QueueRef {
  int32 id;
  int32 max_attempts;
  bool notify;
  bool paused;
  Interval lease;
  double rate_limit;  // claims per second; 0: no limit
};

// The queue named `name`, or undefined_object with a hint.
QueueRef FindQueue(pg::SpiSession& spi, std::string_view name);

// The queue's settings from this backend's cache (pg/queue_cache.h), looked
// up on a miss; raises undefined_object. Processes pending invalidations
// first, so whatever committed before this call is seen.
pg::CachedQueue CurrentQueue(pg::SpiSession& spi, std::string_view name);

// The same without processing invalidations: for callers that do so after
// taking the queue's lock.
pg::CachedQueue CachedOrFoundQueue(pg::SpiSession& spi, std::string_view name);

// Jobs were added to the queue in this transaction, the first of them in
// claim order at `first`: at commit the queue's claim hint is lowered and
// waiting claims are woken (pg/wakeup.h), and LISTEN pgq clients are
// notified if the queue asks for it (`notify`).
void AnnounceNewJobs(pg::SpiSession& spi, int32 queue_id, bool notify, std::string_view name,
                     const core::ClaimKey& first);

// The claim-order key (core/claim_hint.h) of row `row` of a statement that
// returned a job's columns named priority, run_at and id.
core::ClaimKey ClaimKeyOf(const pg::Result& result, uint64 row);

// Raises undefined_object for `name`.
[[noreturn]] void RaiseUnknownQueue(std::string_view name);

}  // namespace pgq::api
