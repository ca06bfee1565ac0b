#include "service/backpressure.h"

#include <algorithm>
#include <string>

#include "pg/boundary.h"
#include "pg/ledger.h"
#include "pg/queue_cache.h"
#include "pg/queue_slots.h"
#include "service/queue_ref.h"
#include "service/rights.h"
#include "store/jobs.h"
#include "store/queues.h"

extern "C" {
#include "miscadmin.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"
}

namespace pgq::service {

namespace {

// The queue's slot, or 55000: without one its count cannot be kept (the
// library not preloaded, or the cluster's kMaxQueueSlots queues taken).
pg::QueueSlot* SlotFor(int32 queue_id, std::string_view name) {
  pg::QueueSlot* slot = pg::FindQueueSlot(queue_id);
  if (slot == nullptr) {
    pg::Raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        "the max_pending of queue \"" + std::string(name) + "\" cannot be kept",
        "Its count of unfinished jobs lives in shared memory, which has no slot for it "
        "(pgq_cpp not preloaded, or " +
            std::to_string(pg::kMaxQueueSlots) + " queues in the cluster).",
        "Remove the limit with pgq.alter_queue('" + std::string(name) + "', max_pending => 0).");
  }
  return slot;
}

// Another backend is counting the queue: wait until its count ends (or a
// short while: it may have taken another snapshot slot's turn).
void AwaitOtherCount(pg::QueueSlot* slot) {
  pg::AwaitCount(slot, 10);
  (void)pg::TakeOverDeadCount(slot);  // its backend ended with a FATAL
}

// A waiter for room looks again this often whatever wakes it (a safety
// net: completions and alters wake it at their commit).
constexpr long kRoomRecheckMillis = 10000;

// The window of a count, closed if the count raises (its state as before).
class CountWindow {
 public:
  explicit CountWindow(pg::QueueSlot* slot) : slot_(slot) {}
  ~CountWindow() {
    if (slot_ != nullptr) pg::AbandonPendingCount(slot_);
  }
  CountWindow(const CountWindow&) = delete;
  CountWindow& operator=(const CountWindow&) = delete;
  void Ended() { slot_ = nullptr; }

 private:
  pg::QueueSlot* slot_;
};

// Makes sure the queue's count is known: counts it, or waits for the
// backend that is counting it.
void EnsureCounted(pg::SpiSession& spi, int32 queue_id, pg::QueueSlot* slot) {
  for (;;) {
    const core::PendingCount now = pg::ReadPendingCount(slot);
    if (now.state == core::PendingCount::kKnown) return;
    if (!now.window && CountPending(spi, queue_id)) continue;
    AwaitOtherCount(slot);
  }
}

}  // namespace

std::optional<core::CountResult> CountPending(pg::SpiSession& spi, int32 queue_id) {
  pg::QueueSlot* slot = pg::FindQueueSlot(queue_id);
  if (slot == nullptr || !pg::BeginPendingCount(slot)) return std::nullopt;
  CountWindow window(slot);
  // Taken after the window opened: a commit that ended before is in it;
  // one that ends from now on is decided by it (pg/queue_slots.h). Its
  // command id 0 hides this transaction's own changes: they reach the
  // count at its commit, through its notes.
  const Snapshot snapshot = pg::Guard([] {
    Snapshot taken = RegisterSnapshot(GetLatestSnapshot());
    taken->curcid = FirstCommandId;
    return taken;
  });
  if (!pg::PublishPendingSnapshot(slot, snapshot)) {
    window.Ended();
    pg::Guard([snapshot] { UnregisterSnapshot(snapshot); });
    return std::nullopt;
  }
  const int64 counted = store::CountUnfinished(spi, queue_id, snapshot);
  const core::CountResult result = pg::EndPendingCount(slot, counted);
  window.Ended();
  pg::Guard([snapshot] { UnregisterSnapshot(snapshot); });
  if (!result.counted) return std::nullopt;
  return result;
}

core::CountResult CheckPending(pg::SpiSession& spi, int32 queue_id, std::string_view name) {
  pg::QueueSlot* slot = SlotFor(queue_id, name);
  for (;;) {
    if (const std::optional<core::CountResult> result = CountPending(spi, queue_id)) {
      return *result;
    }
    AwaitOtherCount(slot);
  }
}

void ReserveRoom(pg::SpiSession& spi, int32 queue_id, std::string_view name, int32 limit,
                 int64 jobs) {
  if (limit <= 0 || jobs <= 0) return;
  pg::QueueSlot* slot = SlotFor(queue_id, name);
  for (;;) {
    int64 unfinished = 0;
    switch (pg::ledger::ReserveRoom(queue_id, slot, jobs, limit, &unfinished)) {
      case core::Room::kReserved:
        return;
      case core::Room::kUnknown:
        EnsureCounted(spi, queue_id, slot);
        continue;
      case core::Room::kFull:
        pg::CountRefusal(slot);
        pg::Raise(
            ERRCODE_CONFIGURATION_LIMIT_EXCEEDED, "queue \"" + std::string(name) + "\" is full",
            "It holds " + std::to_string(unfinished) + " unfinished jobs of its max_pending " +
                std::to_string(limit) + "; this call adds " + std::to_string(jobs) + ".",
            "Wait for room with pgq.wait_for_room('" + std::string(name) +
                "', interval) and enqueue again, or raise its max_pending with "
                "pgq.alter_queue.");
    }
  }
}

bool WaitForRoom(pg::SpiSession& spi, std::string_view name, long millis) {
  const auto now = [] { return pg::Guard([] { return GetCurrentTimestamp(); }); };
  const TimestampTz until = now() + static_cast<int64>(std::max<long>(millis, 0)) * 1000;
  const QueueRef queue = CurrentQueue(spi, name);
  RequireRight(spi, queue.id, name, core::kProduce | core::kAdmin);
  int32 limit = queue.max_pending;
  for (;;) {
    if (limit <= 0) return true;
    pg::QueueSlot* slot = SlotFor(queue.id, name);
    EnsureCounted(spi, queue.id, slot);
    const long left = pg::Guard(
        [until] { return TimestampDifferenceMilliseconds(GetCurrentTimestamp(), until); });
    if (pg::WaitForRoom(slot, limit, std::min<long>(left, kRoomRecheckMillis))) return true;
    if (now() >= until) return false;
    // Woken: the limit read again as committed now. An alter_queue that
    // changed it wakes the waiters at its commit (pg/ledger.h
    // NoteRoomChanged), before its invalidation reaches the cache.
    const std::optional<int32> current = store::MaxPendingOf(spi, queue.id);
    if (!current) RaiseUnknownQueue(name);
    limit = *current;
  }
}

}  // namespace pgq::service
