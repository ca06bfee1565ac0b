#include "core/backoff.h"

#include <algorithm>
#include <limits>

namespace pgq::core {

int64_t BackoffCeiling(const BackoffPolicy& policy, int32_t attempt) {
  const int64_t base = std::max<int64_t>(policy.base_us, 0);
  const int64_t cap = std::max<int64_t>(policy.max_us, 0);
  if (base == 0) return 0;
  const int32_t doublings = std::max<int32_t>(attempt, 1) - 1;
  // base * 2^doublings, saturating: stop doubling once we pass the cap.
  int64_t delay = base;
  for (int32_t i = 0; i < doublings && delay < cap; ++i) {
    if (delay > std::numeric_limits<int64_t>::max() / 2) return cap;
    delay *= 2;
  }
  return std::min(delay, cap);
}

int64_t BackoffDelay(const BackoffPolicy& policy, int32_t attempt, double uniform) {
  const int64_t ceiling = BackoffCeiling(policy, attempt);
  if (!(uniform >= 0.0)) uniform = 0.0;  // also catches NaN
  if (uniform >= 1.0) uniform = 0.0;
  const int64_t half = ceiling / 2;
  const int64_t spread = ceiling - half;
  return half + static_cast<int64_t>(static_cast<double>(spread) * uniform);
}

}  // namespace pgq::core
