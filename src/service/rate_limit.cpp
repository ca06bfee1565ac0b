#include "service/rate_limit.h"

#include "store/rate_buckets.h"

namespace pgq::service {

int32 RateBucket::Take(int32 want, TimestampTz now) {
  if (slot_ != nullptr) return pg::TakeRateTokens(slot_, rate_, now, want);
  const std::optional<core::TokenBucket> bucket =
      store::LockRateBucket(spi_, queue_id_, core::BucketBurst(rate_), now);
  if (!bucket) return 0;  // the queue is being dropped
  row_ = *bucket;
  return core::TakeTokens(row_, rate_, now, want);
}

void RateBucket::Return(int32 unused) {
  if (slot_ != nullptr) {
    pg::ReturnRateTokens(slot_, rate_, unused);
    return;
  }
  core::ReturnTokens(row_, rate_, unused);
  store::StoreRateBucket(spi_, queue_id_, row_);
}

int64 RateBucket::MicrosUntilToken() const {
  return slot_ != nullptr ? pg::MicrosUntilRateToken(slot_, rate_)
                          : core::MicrosUntilToken(row_, rate_);
}

}  // namespace pgq::service
