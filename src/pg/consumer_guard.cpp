#include "pg/consumer_guard.h"

#include "pg/boundary.h"

namespace pgq::pg {

namespace {

constexpr uint16 kConsumerGuardKind = 6;

LOCKTAG GuardTag(int32 stream_id, int32 consumer_id) {
  LOCKTAG tag;
  SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, static_cast<uint32>(stream_id),
                       static_cast<uint32>(consumer_id), kConsumerGuardKind);
  return tag;
}

bool HeldByMe(const LOCKTAG& tag) {
  return Guard([&] {
#if PG_VERSION_NUM >= 170000
    return LockHeldByMe(&tag, ExclusiveLock, false);
#else
    return LockHeldByMe(&tag, ExclusiveLock);
#endif
  });
}

}  // namespace

bool TakeConsumerGuard(int32 stream_id, int32 consumer_id) {
  const LOCKTAG tag = GuardTag(stream_id, consumer_id);
  if (HeldByMe(tag)) return true;
  // A session lock: it outlives this transaction (committed or not) and
  // ends with the session, a crash of its backend included.
  return Guard([&] { return LockAcquire(&tag, ExclusiveLock, true, true); }) !=
         LOCKACQUIRE_NOT_AVAIL;
}

bool ReleaseConsumerGuard(int32 stream_id, int32 consumer_id) {
  const LOCKTAG tag = GuardTag(stream_id, consumer_id);
  if (!HeldByMe(tag)) return false;
  return Guard([&] { return LockRelease(&tag, ExclusiveLock, true); });
}

}  // namespace pgq::pg
