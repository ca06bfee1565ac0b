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

bool BeginCount(PendingCount& count, int32_t pid) {
  if (count.window) return false;
  count.window = true;
  count.seeing = false;
  count.window_lost = false;
  count.early_used = 0;
  count.unseen = 0;
  count.snapshot = -1;
  count.counter_pid = pid;
  if (count.state == PendingCount::kUnknown) count.state = PendingCount::kCounting;
  return true;
}

CountResult EndCount(PendingCount& count, int32_t pid, int64_t counted) {
  CountResult result;
  if (!count.window || !count.seeing || count.counter_pid != pid) return result;
  result.counted = true;
  result.was_known = count.state == PendingCount::kKnown;
  result.kept = count.committed;
  result.found = counted + count.unseen;
  count.committed = result.found;
  count.state = PendingCount::kKnown;
  count.window = false;
  count.seeing = false;
  count.snapshot = -1;
  count.unseen = 0;
  count.counter_pid = 0;
  return result;
}

void AbandonCount(PendingCount& count, int32_t pid) {
  if (!count.window || count.counter_pid != pid) return;
  count.window = false;
  count.seeing = false;
  count.window_lost = false;
  count.early_used = 0;
  count.snapshot = -1;
  count.unseen = 0;
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
