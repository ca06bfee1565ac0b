#include "pg/queue_lock.h"

#include "pg/boundary.h"

extern "C" {
#include "common/hashfn.h"
}

namespace pgq::pg {

namespace {

constexpr uint32 kPgqLockSpace = 0x70677163;  // "pgqc"
constexpr uint16 kPgqLockKind = 3;
constexpr uint16 kPgqGroupLockKind = 4;
constexpr uint16 kPgqCapLockKind = 5;
constexpr uint16 kPgqRingParentLockKind = 6;

LOCKTAG RingParentTag(int64 id) {
  LOCKTAG tag;
  SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, static_cast<uint32>(static_cast<uint64>(id) >> 32),
                       static_cast<uint32>(id), kPgqRingParentLockKind);
  return tag;
}

LOCKTAG CapTag(int32 queue_id) {
  LOCKTAG tag;
  SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, static_cast<uint32>(queue_id), kPgqLockSpace,
                       kPgqCapLockKind);
  return tag;
}

LockAcquireResult LockQueue(int32 queue_id, LOCKMODE mode, bool dont_wait) {
  LOCKTAG tag;
  SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, static_cast<uint32>(queue_id), kPgqLockSpace,
                       kPgqLockKind);
  return Guard([&] { return LockAcquire(&tag, mode, false, dont_wait); });
}

}  // namespace

void LockQueueShared(int32 queue_id) { (void)LockQueue(queue_id, ShareLock, false); }

bool TryLockQueueShared(int32 queue_id) {
  return LockQueue(queue_id, ShareLock, true) != LOCKACQUIRE_NOT_AVAIL;
}

void LockQueueExclusive(int32 queue_id) { (void)LockQueue(queue_id, ExclusiveLock, false); }

void LockGroup(int32 queue_id, std::string_view group_key) {
  const uint32 hash =
      DatumGetUInt32(hash_any(reinterpret_cast<const unsigned char*>(group_key.data()),
                              static_cast<int>(group_key.size())));
  LOCKTAG tag;
  SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, static_cast<uint32>(queue_id), hash, kPgqGroupLockKind);
  Guard([&] { (void)LockAcquire(&tag, ExclusiveLock, false, false); });
}

void LockQueueCap(int32 queue_id) {
  const LOCKTAG tag = CapTag(queue_id);
  Guard([&] { (void)LockAcquire(&tag, ExclusiveLock, false, false); });
}

void UnlockQueueCap(int32 queue_id) {
  const LOCKTAG tag = CapTag(queue_id);
  Guard([&] { (void)LockRelease(&tag, ExclusiveLock, false); });
}

void LockRingParent(int64 id, bool exclusive) {
  const LOCKTAG tag = RingParentTag(id);
  Guard([&] { (void)LockAcquire(&tag, exclusive ? ExclusiveLock : ShareLock, false, false); });
}

bool RingParentHeld(int64 id) {
  const LOCKTAG tag = RingParentTag(id);
  return Guard([&] { return LockHeldByMe(&tag, ShareLock); });
}

void UnlockRingParent(int64 id) {
  const LOCKTAG tag = RingParentTag(id);
  Guard([&] { (void)LockRelease(&tag, ShareLock, false); });
}

}  // namespace pgq::pg
