#include "pg/queue_lock.h"

#include "pg/boundary.h"

namespace pgq::pg {

namespace {

constexpr uint32 kPgqLockSpace = 0x70677163;  // "pgqc"
constexpr uint16 kPgqLockKind = 3;

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

}  // namespace pgq::pg
