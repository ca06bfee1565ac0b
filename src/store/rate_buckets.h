// The token buckets of rate-limited queues when they are not in shared
// memory (not preloaded, or the slot table full): pgq.rate_buckets, one row
// per queue. The rule is core/rate_limit.h; the claim side service/rate_limit.h.
#pragma once

#include <optional>

#include "core/rate_limit.h"
#include "pg/spi.h"

namespace pgq::store {

// Queue `queue_id`'s bucket, its row created full (`burst` tokens at `now`)
// by the queue's first claim, and locked (FOR UPDATE) until the end of the
// transaction; nullopt when the queue is being dropped.
std::optional<core::TokenBucket> LockRateBucket(pg::SpiSession& spi, int32 queue_id, double burst,
                                                TimestampTz now);
// Stores the bucket (its row locked by LockRateBucket).
void StoreRateBucket(pg::SpiSession& spi, int32 queue_id, const core::TokenBucket& bucket);

}  // namespace pgq::store
