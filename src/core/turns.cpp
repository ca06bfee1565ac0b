#include "core/turns.h"

#include <algorithm>

namespace pgq::core {

std::size_t NextTurnIndex(const int64_t* active_ids, std::size_t count, int64_t last_served) {
  if (count == 0) return count;
  // The first id above the cursor; past the end: wrap to a new round.
  const int64_t* next = std::upper_bound(active_ids, active_ids + count, last_served);
  return next == active_ids + count ? 0 : static_cast<std::size_t>(next - active_ids);
}

}  // namespace pgq::core
