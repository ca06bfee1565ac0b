#include "core/pending_count.h"

#include <algorithm>

namespace pgq::core {

Room Reserve(PendingCount& count, int64_t jobs, int64_t limit) {
  if (count.state != PendingCount::kKnown) return Room::kUnknown;
  if (count.committed + count.reserved + jobs > limit) return Room::kFull;
  count.reserved += jobs;
  return Room::kReserved;
}

void GiveBack(PendingCount& count, int64_t jobs) {
  // Never below zero (a commit callback of a new installation's slot must
  // not wrap it).
  count.reserved = std::max<int64_t>(count.reserved - jobs, 0);
}

bool Committed(PendingCount& count, int64_t delta, int64_t reserved, uint32_t xid) {
  GiveBack(count, reserved);
  const bool freed = reserved > 0;
  if (delta == 0) return freed;
  if (count.window) {
    if (count.window_used == PendingCount::kWindow) {
      count.window_lost = true;
    } else {
      count.window_xids[count.window_used] = xid;
      count.window_deltas[count.window_used] = delta;
      ++count.window_used;
    }
  }
  if (count.state != PendingCount::kKnown) return freed;
  count.committed += delta;
  return delta < 0 || freed;
}

bool BeginCount(PendingCount& count, int32_t pid) {
  if (count.window) return false;
  count.window = true;
  count.window_lost = false;
  count.window_used = 0;
  count.counter_pid = pid;
  if (count.state == PendingCount::kUnknown) count.state = PendingCount::kCounting;
  return true;
}

void AbandonCount(PendingCount& count, int32_t pid) {
  if (!count.window || count.counter_pid != pid) return;
  count.window = false;
  count.window_lost = false;
  count.window_used = 0;
  count.counter_pid = 0;
  if (count.state == PendingCount::kCounting) count.state = PendingCount::kUnknown;
}

void ForgetCount(PendingCount& count) {
  AbandonCount(count, count.counter_pid);
  count.state = PendingCount::kUnknown;
  count.committed = 0;
}

int64_t LowWater(int64_t limit) { return limit - limit / 10; }

bool HasRoom(const PendingCount& count, int64_t limit) {
  return count.state == PendingCount::kKnown && count.committed + count.reserved < LowWater(limit);
}

}  // namespace pgq::core
