// The single-active guard on a stream consumer (issue 30 R1): a
// session-level lock that pgq.acquire_consumer takes once it has checked the
// caller's consume right, so one relay per (stream, consumer) reads at a
// time and a standby takes over when the holder's session ends.
//
// It is an advisory lock tag whose field4 is ours (user advisory locks use 1
// and 2, pg/queue_lock.cpp 3 to 5): no SQL call can take or release it, so a
// role with no right on the stream cannot hold it first. pg_locks shows it
// (locktype 'advisory', objsubid 6), which tells who holds it and nothing
// anyone can use.
#pragma once

#include "pg/pg.h"

namespace pgq::pg {

// Takes the guard for this session unless another session holds it; true
// if this session holds it now (also when it held it already: a second take
// is not counted, one release frees it). Never waits.
bool TakeConsumerGuard(int32 stream_id, int32 consumer_id);

// Releases the guard if this session holds it; whether it did.
bool ReleaseConsumerGuard(int32 stream_id, int32 consumer_id);

}  // namespace pgq::pg
