// Looking a queue up by name, shared by every function that takes one.
#pragma once

#include "pg/queue_cache.h"
#include "pg/spi.h"
#include "service/rights.h"

namespace pgq::service {

// A queue's id and settings, as read from pgq.queues or the cache.
using QueueRef = pg::CachedQueue;

// The queue named `name`, or undefined_object with a hint.
QueueRef FindQueue(pg::SpiSession& spi, std::string_view name);

// The same, then insufficient_privilege unless the current user holds at
// least one of `wanted` on it (service/rights.h): what a function that
// takes a queue's name does first.
inline QueueRef FindQueueWithRight(pg::SpiSession& spi, std::string_view name, uint8 wanted) {
  QueueRef queue = FindQueue(spi, name);
  RequireRight(spi, queue.id, name, wanted);
  return queue;
}

// The queue's settings from this backend's cache (pg/queue_cache.h), looked
// up on a miss; raises undefined_object. Processes pending invalidations
// first, so whatever committed before this call is seen.
pg::CachedQueue CurrentQueue(pg::SpiSession& spi, std::string_view name);

// The same without processing invalidations: for callers that do so after
// taking the queue's lock.
pg::CachedQueue CachedOrFoundQueue(pg::SpiSession& spi, std::string_view name);

// Raises undefined_object for `name`.
[[noreturn]] void RaiseUnknownQueue(std::string_view name);

}  // namespace pgq::service
