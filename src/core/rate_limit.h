// A queue's rate limit: a token bucket. Pure C++; kept in shared memory when
// the library is preloaded and in a row of pgq.rate_buckets otherwise
// (pg/rate_limit.cpp).
//
// The bucket holds at most `burst` tokens and gains `rate` tokens a second.
// A claim of n jobs takes min(n, whole tokens available) tokens first, claims
// at most that many jobs, and gives back what it did not use. So over any
// interval of t seconds a queue hands out at most burst + rate * t jobs.
#pragma once

#include <cstdint>

namespace pgq::core {

// One second's worth of claims, and at least one.
double BucketBurst(double rate);

// The valid limits: finite and > 0 (NULL in SQL: no limit).
bool IsValidRateLimit(double rate);

struct TokenBucket {
  double tokens;
  int64_t updated_us;  // when `tokens` was last brought up to date
};

// A full bucket at `now_us`.
TokenBucket FullBucket(double rate, int64_t now_us);

// Refills the bucket up to `now_us` and takes up to `want` whole tokens.
// Returns how many it took. A clock that went backwards refills nothing.
int32_t TakeTokens(TokenBucket& bucket, double rate, int64_t now_us, int32_t want);

// Gives back tokens taken but not used, never above the burst.
void ReturnTokens(TokenBucket& bucket, double rate, int32_t unused);

// Microseconds from `bucket.updated_us` until one whole token is available
// (0 if one is).
int64_t MicrosUntilToken(const TokenBucket& bucket, double rate);

}  // namespace pgq::core
