#include "pg/queue_cache.h"

#include <array>
#include <boost/container/flat_map.hpp>

#include "core/validate.h"
#include "pg/allocator.h"
#include "pg/boundary.h"

extern "C" {
#include "catalog/namespace.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
}

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
// INVARIANT: only Find/Remember touch the map's storage; the invalidation
// callback only clears it (no allocation, cannot fail).
QueueMap* cache = nullptr;
uint64 generation = 0;

void OnRelcacheInvalidation(Datum, Oid) {
  if (cache != nullptr) cache->clear();
  ++generation;
}

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

// Roles changed (membership granted or revoked, a role altered, renamed or
// dropped): the rights lists and answers kept per generation (api/rights.h)
// are stale too.
void OnRoleInvalidation(Datum, int, uint32) { ++generation; }

}  // namespace

void QueueCache::Register() {
  CacheRegisterRelcacheCallback(OnRelcacheInvalidation, 0);
  CacheRegisterSyscacheCallback(AUTHMEMROLEMEM, OnRoleInvalidation, 0);
  CacheRegisterSyscacheCallback(AUTHOID, OnRoleInvalidation, 0);
}

bool QueueCache::Find(std::string_view name, CachedQueue* queue) {
  if (cache == nullptr || name.size() > core::kMaxQueueNameLength) return false;
  const auto found = cache->find(QueueKey(name));
  if (found == cache->end()) return false;
  *queue = found->second;
  return true;
}

void QueueCache::Remember(std::string_view name, const CachedQueue& queue) {
  if (name.size() > core::kMaxQueueNameLength) return;
  Map()[QueueKey(name)] = queue;
}

uint64 QueueCache::Generation() { return generation; }

bool QueueCache::Revalidate(uint64 seen) {
  Guard([] { AcceptInvalidationMessages(); });
  return generation == seen;
}

void QueueCache::InvalidateAll() {
  Guard([] {
    const Oid schema = get_namespace_oid("pgq", false);
    const Oid queues = get_relname_relid("queues", schema);
    if (OidIsValid(queues)) CacheInvalidateRelcacheByRelid(queues);
  });
}

}  // namespace pgq::pg
