#include "pg/queue_lock.h"

#include "pg/boundary.h"

namespace pgq::pg {

namespace {

constexpr uint32 kPgqLockSpace = 0x70677163;  // "pgqc"
constexpr uint16 kPgqLockKind = 3;

void LockQueue(int32 queue_id, LOCKMODE mode) {
  LOCKTAG tag;
  SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, static_cast<uint32>(queue_id), kPgqLockSpace,
                       kPgqLockKind);
  Guard([&] { (void)LockAcquire(&tag, mode, false, false); });
}

}  // namespace

void LockQueueShared(int32 queue_id) { LockQueue(queue_id, ShareLock); }

void LockQueueExclusive(int32 queue_id) { LockQueue(queue_id, ExclusiveLock); }

}  // namespace pgq::pg
