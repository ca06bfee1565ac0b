// Retry delay after a failed attempt. Pure C++: no PostgreSQL headers.
#pragma once

#include <cstdint>

namespace pgq::core {

struct BackoffPolicy {
  int64_t base_us;  // delay after the first failed attempt, before jitter
  int64_t max_us;   // cap on the exponential part
};

// Delay before attempt `attempt + 1` after attempt `attempt` (>= 1) failed.
//
// The exponential part is d = min(max, base * 2^(attempt-1)). We use "equal
// jitter": the result is d/2 + uniform * d/2, so it lies in [d/2, d]. Half the
// delay is guaranteed (a flapping downstream gets real rest), the other half
// is spread so that jobs failed together do not come back together.
//
// `uniform` is a random number in [0, 1) supplied by the caller, so that this
// function stays pure and testable. Never overflows; never negative.
int64_t BackoffDelay(const BackoffPolicy& policy, int32_t attempt, double uniform);

// The exponential part alone, without jitter (exposed for tests and docs).
int64_t BackoffCeiling(const BackoffPolicy& policy, int32_t attempt);

}  // namespace pgq::core
