#include "core/wait.h"

#include <limits>

namespace pgq::core {

int64_t WaitEnd(int64_t now_us, int64_t wait_us) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  if (wait_us <= 0) return now_us;
  return now_us > kMax - wait_us ? kMax : now_us + wait_us;
}

int64_t MillisLeft(int64_t end_us, int64_t now_us) {
  if (end_us <= now_us) return 0;
  // end_us - now_us cannot overflow: both are >= 0 on a monotonic clock that
  // starts at boot, and end_us > now_us here.
  const int64_t left = end_us - now_us;
  return left / 1000 + (left % 1000 != 0 ? 1 : 0);
}

}  // namespace pgq::core
