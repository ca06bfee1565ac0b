#include "pg/queue_cache.h"

#include <array>
#include <boost/container/flat_map.hpp>

#include "core/validate.h"
#include "pg/allocator.h"
#include "pg/boundary.h"
#include "pg/invalidation.h"

namespace pgq::pg {

namespace {

// Queue names are at most 63 bytes, so keys need no heap allocation.
struct QueueKey {
  std::array<char, core::kMaxQueueNameLength> bytes{};
  uint8 length = 0;

  explicit QueueKey(std::string_view name) : length(static_cast<uint8>(name.size())) {
    std::memcpy(bytes.data(), name.data(), name.size());
  }
  std::string_view view() const { return std::string_view(bytes.data(), length); }
  bool operator<(const QueueKey& other) const { return view() < other.view(); }
};

using Entry = std::pair<QueueKey, CachedQueue>;
using QueueMap =
    boost::container::flat_map<QueueKey, CachedQueue, std::less<QueueKey>, ContextAllocator<Entry>>;

// Created on first use in a memory context that lives as long as the backend.
// INVARIANT: every entry is as pgq.queues was when `epoch` was marked, or
// later; Find empties the map when the epoch moved.
QueueMap* cache = nullptr;
CacheEpoch epoch{invalidation::kQueues};

QueueMap& Map() {
  if (cache == nullptr) {
    MemoryContext context = Guard([] {
      return AllocSetContextCreate(TopMemoryContext, "pgq queue cache", ALLOCSET_SMALL_SIZES);
    });
    void* memory = Guard([context] { return MemoryContextAlloc(context, sizeof(QueueMap)); });
    cache = new (memory) QueueMap(ContextAllocator<Entry>(context));
  }
  return *cache;
}

}  // namespace

bool QueueCache::Find(std::string_view name, CachedQueue* queue) {
  if (cache == nullptr || name.size() > core::kMaxQueueNameLength) return false;
  if (!epoch.Valid()) {
    cache->clear();  // no allocation, cannot fail
    epoch.Mark(epoch.Current());
    return false;
  }
  const auto found = cache->find(QueueKey(name));
  if (found == cache->end()) return false;
  *queue = found->second;
  return true;
}

uint64 QueueCache::Begin() { return epoch.Begin(); }

void QueueCache::Remember(std::string_view name, const CachedQueue& queue, uint64 begun) {
  if (name.size() > core::kMaxQueueNameLength || begun != epoch.Current()) return;
  QueueMap& map = Map();
  if (!epoch.Valid()) {
    map.clear();
    epoch.Mark(begun);
  }
  map[QueueKey(name)] = queue;
}

bool QueueCache::StillAt(uint64 begun) { return epoch.StillAt(begun); }

}  // namespace pgq::pg
