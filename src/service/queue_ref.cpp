#include "service/queue_ref.h"

#include "pg/invalidation.h"
#include "store/queues.h"

namespace pgq::service {

void RaiseUnknownQueue(std::string_view name) {
  pg::Raise(ERRCODE_UNDEFINED_OBJECT, "queue \"" + std::string(name) + "\" does not exist", {},
            "Create it with pgq.create_queue('" + std::string(name) + "').");
}

QueueRef FindQueue(pg::SpiSession& spi, std::string_view name) {
  const std::optional<pg::CachedQueue> found = store::FindQueue(spi, name);
  if (!found) RaiseUnknownQueue(name);
  return *found;
}

pg::CachedQueue CachedOrFoundQueue(pg::SpiSession& spi, std::string_view name) {
  pg::CachedQueue queue;
  if (pg::QueueCache::Find(name, &queue)) return queue;
  const uint64 begun = pg::QueueCache::Begin();
  queue = FindQueue(spi, name);  // raises undefined_object
  pg::QueueCache::Remember(name, queue, begun);
  return queue;
}

pg::CachedQueue CurrentQueue(pg::SpiSession& spi, std::string_view name) {
  pg::invalidation::Accept();
  return CachedOrFoundQueue(spi, name);
}

}  // namespace pgq::service
