// A queue's rate limit at claim time (core/rate_limit.h): tokens are taken
// before a claim and what the claim did not use is given back.
//
// Preloaded, the bucket is in the queue's shared-memory slot. Otherwise (or
// when the slot table is full) it is the queue's row in pgq.rate_buckets,
// locked by the first claim of the transaction until it ends: claims of a
// rate-limited queue then run one at a time, which a queue limited to a few
// claims a second does not notice.
#pragma once

#include "pg/queue_slots.h"
#include "pg/spi.h"

namespace pgq::service {

class RateBucket {
 public:
  // `slot` may be nullptr (no shared memory for this queue).
  RateBucket(pg::SpiSession& spi, int32 queue_id, double rate, pg::QueueSlot* slot)
      : spi_(spi), queue_id_(queue_id), rate_(rate), slot_(slot) {}

  // Takes up to `want` tokens at `now`; returns how many it took.
  int32 Take(int32 want, TimestampTz now);
  // Gives back `unused` of the tokens just taken (and, for the row bucket,
  // stores the bucket).
  void Return(int32 unused);
  // Microseconds until the next token, after a Take that got none.
  int64 MicrosUntilToken() const;

 private:
  pg::SpiSession& spi_;
  int32 queue_id_;
  double rate_;
  pg::QueueSlot* slot_;
  core::TokenBucket row_{0, 0};  // the row's bucket, between Take and Return
};

}  // namespace pgq::service
