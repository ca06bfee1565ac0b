#include "core/rate_limit.h"

#include <algorithm>
#include <cmath>

namespace pgq::core {

double BucketBurst(double rate) { return std::max(1.0, rate); }

bool IsValidRateLimit(double rate) { return std::isfinite(rate) && rate > 0; }

TokenBucket FullBucket(double rate, int64_t now_us) {
  return TokenBucket{BucketBurst(rate), now_us};
}

int32_t TakeTokens(TokenBucket& bucket, double rate, int64_t now_us, int32_t want) {
  const double burst = BucketBurst(rate);
  if (now_us > bucket.updated_us) {
    const double gained = static_cast<double>(now_us - bucket.updated_us) * rate / 1e6;
    bucket.tokens = std::min(burst, bucket.tokens + gained);
    bucket.updated_us = now_us;
  }
  bucket.tokens = std::min(bucket.tokens, burst);  // the limit may have been lowered
  const double whole = std::floor(std::max(0.0, bucket.tokens));
  const int32_t taken =
      static_cast<int32_t>(std::min(whole, static_cast<double>(std::max(want, 0))));
  bucket.tokens -= taken;
  return taken;
}

void ReturnTokens(TokenBucket& bucket, double rate, int32_t unused) {
  if (unused <= 0) return;
  bucket.tokens = std::min(BucketBurst(rate), bucket.tokens + unused);
}

int64_t MicrosUntilToken(const TokenBucket& bucket, double rate) {
  if (bucket.tokens >= 1.0) return 0;
  return static_cast<int64_t>(std::ceil((1.0 - bucket.tokens) * 1e6 / rate));
}

}  // namespace pgq::core
