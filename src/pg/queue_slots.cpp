#include "pg/queue_slots.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "pg/boundary.h"
#include "pg/shared.h"

extern "C" {
#include "access/transam.h"
#include "access/twophase.h"
#include "access/xact.h"
#include "miscadmin.h"
#include "storage/condition_variable.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/wait_event.h"
#include "utils/hsearch.h"
#include "utils/snapmgr.h"
}

namespace pgq::pg {

namespace {

struct SlotKey {
  Oid database;
  int32 queue_id;
};

}  // namespace

struct QueueSlot {
  SlotKey key;  // first: the hash key
  slock_t mutex;
  core::ClaimHint hint;
  bool has_bucket;
  core::TokenBucket bucket;
  pg_atomic_uint64 finished;  // completions not yet in pgq.finished
  pg_atomic_uint32 flusher;   // pid of the backend writing `finished` out, or 0
  // Under `mutex`: the flush in progress (its transaction and what it
  // writes, still counted in `finished`) and the last one that ended
  // committed (already subtracted): what lets a reader agree with its
  // snapshot of pgq.finished (UnflushedFinished).
  TransactionId flush_xid;
  uint64 flush_amount;
  TransactionId last_flush_xid;
  uint64 last_flush_amount;
  pg_atomic_uint64 counts[kCounterKinds];
  // The queue has a max_running, as its last claim read it: a running job
  // that leaves wakes the queue's waiting claims (pg/ledger.h).
  pg_atomic_uint32 capped;
  // A priority an enqueue found no ring for (1 << 32 | the priority), or 0:
  // one at a time, until the maintenance takes it (WantPriorityRing).
  pg_atomic_uint64 wants_ring;
  // Backpressure (core/pending_count.h): under `mutex`.
  core::PendingCount pending;
  // Waiters for room (pgq.wait_for_room), woken by a commit that lowers it.
  ConditionVariable room;
  // Enqueues refused by max_pending, counted at once (they roll back).
  pg_atomic_uint64 refusals;
  // Transactions with notes for the count between their pre-commit and
  // their commit callback, in two generations (EnterCommit): a count
  // switches generation once its snapshot is published and waits for the
  // old one to drain before it ends, so that no commit its snapshot saw
  // applies its delta after the count (it would count twice).
  pg_atomic_uint32 committing[2];
  uint32 commit_generation;  // under `mutex`
  uint32 drain_generation;   // the generation the count in progress waits for
};

namespace {

HTAB* slots = nullptr;

// A few slots this backend used last, so a claim does not search the shared
// table (and take its lock) every time. Entries are never removed from the
// shared table, so a remembered pointer stays valid.
struct RecentSlot {
  int32 queue_id;
  QueueSlot* slot;
};
constexpr int kRecentSlots = 8;
RecentSlot recent[kRecentSlots];
int recent_next = 0;

LWLock* SlotsLock() { return Shared()->slots_lock; }

SlotKey KeyOf(int32 queue_id) {
  SlotKey key;
  std::memset(&key, 0, sizeof(key));  // HASH_BLOBS compares the padding too
  key.database = MyDatabaseId;
  key.queue_id = queue_id;
  return key;
}

}  // namespace

// ---- The snapshots of counts in progress (backpressure): a few at once in
// the whole server, each the xmin, xmax and running xids of one count's
// snapshot, sorted, for the commits that end during the count to ask
// whether it saw them (CommitPending). Written by the counter before it
// publishes the index; read-only while a slot refers to it.
namespace {

constexpr int kCountSnapshots = 8;

struct CountSnapshot {
  pg_atomic_uint32 owner;  // the counting backend's pid, 0: free
  TransactionId xmin;
  TransactionId xmax;
  int xcnt;
  TransactionId xip[FLEXIBLE_ARRAY_MEMBER];
};

char* count_snapshots = nullptr;

int MaxSnapshotXids() { return MaxBackends + max_prepared_xacts; }

Size CountSnapshotStride() {
  return MAXALIGN(offsetof(CountSnapshot, xip) + sizeof(TransactionId) * MaxSnapshotXids());
}

CountSnapshot* CountSnapshotAt(int index) {
  return reinterpret_cast<CountSnapshot*>(count_snapshots + CountSnapshotStride() * index);
}

// A free entry filled with `snapshot`'s xids, or -1 (all in use: the count
// waits for another time).
int TakeCountSnapshot(Snapshot snapshot) {
  for (int i = 0; i < kCountSnapshots; ++i) {
    CountSnapshot* entry = CountSnapshotAt(i);
    uint32 free = 0;
    if (!pg_atomic_compare_exchange_u32(&entry->owner, &free, static_cast<uint32>(MyProcPid))) {
      continue;
    }
    entry->xmin = snapshot->xmin;
    entry->xmax = snapshot->xmax;
    entry->xcnt = std::min<int>(snapshot->xcnt, MaxSnapshotXids());
    std::copy(snapshot->xip, snapshot->xip + entry->xcnt, entry->xip);
    std::sort(entry->xip, entry->xip + entry->xcnt,
              [](TransactionId a, TransactionId b) { return TransactionIdPrecedes(a, b); });
    pg_write_barrier();  // filled before a slot names it
    return i;
  }
  return -1;
}

void ReleaseCountSnapshot(int index) {
  if (index >= 0) pg_atomic_write_u32(&CountSnapshotAt(index)->owner, 0);
}

// Whether the count snapshot `index` saw the commit of top-level
// transaction `xid` (committed by now): not running when it was taken.
// Memory only, no lock: safe under the slot's spinlock.
bool CountSnapshotSaw(int index, TransactionId xid) {
  if (!TransactionIdIsValid(xid) || index < 0) return true;
  const CountSnapshot* entry = CountSnapshotAt(index);
  if (!TransactionIdPrecedes(xid, entry->xmax)) return false;
  if (TransactionIdPrecedes(xid, entry->xmin)) return true;
  return !std::binary_search(
      entry->xip, entry->xip + entry->xcnt, xid,
      [](TransactionId a, TransactionId b) { return TransactionIdPrecedes(a, b); });
}

}  // namespace

Size QueueSlotsSize() {
  return add_size(hash_estimate_size(kMaxQueueSlots, sizeof(QueueSlot)),
                  mul_size(CountSnapshotStride(), kCountSnapshots));
}

void InitQueueSlots() {
  HASHCTL info;
  std::memset(&info, 0, sizeof(info));
  info.keysize = sizeof(SlotKey);
  info.entrysize = sizeof(QueueSlot);
  slots = ShmemInitHash("pgq_cpp queue slots", kMaxQueueSlots, kMaxQueueSlots, &info,
                        HASH_ELEM | HASH_BLOBS | HASH_FIXED_SIZE);
  bool found = false;
  count_snapshots = static_cast<char*>(ShmemInitStruct(
      "pgq_cpp count snapshots", mul_size(CountSnapshotStride(), kCountSnapshots), &found));
  if (!found) {
    for (int i = 0; i < kCountSnapshots; ++i) pg_atomic_init_u32(&CountSnapshotAt(i)->owner, 0);
  }
}

QueueSlot* FindQueueSlot(int32 queue_id) {
  if (Shared() == nullptr || slots == nullptr) return nullptr;
  for (const RecentSlot& r : recent) {
    if (r.slot != nullptr && r.queue_id == queue_id && r.slot->key.database == MyDatabaseId) {
      return r.slot;
    }
  }
  const SlotKey key = KeyOf(queue_id);
  // Not reached from a cached slot: the claim hot path stops above.
  QueueSlot* slot = Guard([&] {
    LWLockAcquire(SlotsLock(), LW_SHARED);
    auto* found = static_cast<QueueSlot*>(hash_search(slots, &key, HASH_FIND, nullptr));
    LWLockRelease(SlotsLock());
    return found;
  });
  if (slot == nullptr) {
    slot = Guard([&] {
      LWLockAcquire(SlotsLock(), LW_EXCLUSIVE);
      bool found = false;
      // HASH_ENTER_NULL: nullptr instead of an error when the table is full.
      auto* entry = static_cast<QueueSlot*>(hash_search(slots, &key, HASH_ENTER_NULL, &found));
      if (entry != nullptr && !found) {
        SpinLockInit(&entry->mutex);
        entry->hint = core::ClaimHint{};
        entry->has_bucket = false;
        entry->bucket = core::TokenBucket{0, 0};
        pg_atomic_init_u64(&entry->finished, 0);
        pg_atomic_init_u32(&entry->flusher, 0);
        entry->flush_xid = InvalidTransactionId;
        entry->flush_amount = 0;
        entry->last_flush_xid = InvalidTransactionId;
        entry->last_flush_amount = 0;
        for (pg_atomic_uint64& count : entry->counts) pg_atomic_init_u64(&count, 0);
        pg_atomic_init_u32(&entry->capped, 0);
        pg_atomic_init_u64(&entry->wants_ring, 0);
        entry->pending = core::PendingCount{};
        pg_atomic_init_u32(&entry->committing[0], 0);
        pg_atomic_init_u32(&entry->committing[1], 0);
        entry->commit_generation = 0;
        entry->drain_generation = 0;
        ConditionVariableInit(&entry->room);
        pg_atomic_init_u64(&entry->refusals, 0);
      }
      LWLockRelease(SlotsLock());
      return entry;
    });
    if (slot == nullptr) return nullptr;
  }
  recent[recent_next] = RecentSlot{queue_id, slot};
  recent_next = (recent_next + 1) % kRecentSlots;
  return slot;
}

core::ScanPlan PlanClaimScan(QueueSlot* slot, int64 now) {
  SpinLockAcquire(&slot->mutex);
  const core::ScanPlan plan = core::PlanScan(slot->hint, now);
  SpinLockRelease(&slot->mutex);
  return plan;
}

void PublishClaimScan(QueueSlot* slot, const core::ScanPlan& plan, const core::ScanResult& result) {
  SpinLockAcquire(&slot->mutex);
  (void)core::PublishScan(slot->hint, plan, result);
  SpinLockRelease(&slot->mutex);
}

void UpdateClaimHint(QueueSlot* slot, const core::ClaimKey* due, const core::ClaimAlarm& later) {
  SpinLockAcquire(&slot->mutex);
  if (due != nullptr) core::LowerHint(slot->hint, *due);
  if (later.set) core::AddAlarm(slot->hint, later);
  SpinLockRelease(&slot->mutex);
}

int64 NextAlarm(QueueSlot* slot) {
  SpinLockAcquire(&slot->mutex);
  const int64 due = slot->hint.alarm.set ? slot->hint.alarm.due : 0;
  SpinLockRelease(&slot->mutex);
  return due;
}

void ResetQueueHint(QueueSlot* slot) {
  SpinLockAcquire(&slot->mutex);
  core::ResetHint(slot->hint);
  SpinLockRelease(&slot->mutex);
}

namespace {

// `visit(slot)` for each slot of this database, under the slots' lock
// (shared). Unguarded, as its callers: a lock we never nest, a full scan.
template <typename Visit>
void ForEachSlotOfDatabase(Visit visit) {
  if (Shared() == nullptr || slots == nullptr) return;
  LWLockAcquire(SlotsLock(), LW_SHARED);
  HASH_SEQ_STATUS scan;
  hash_seq_init(&scan, slots);
  while (auto* slot = static_cast<QueueSlot*>(hash_seq_search(&scan))) {
    if (slot->key.database == MyDatabaseId) visit(slot);
  }
  LWLockRelease(SlotsLock());
}

}  // namespace

// Unguarded: it runs in commit callbacks and the utility hook, frames without
// C++ objects; nothing in it raises (a lock we never nest, a full scan).
void ResetDatabaseSlots(bool buckets_too) {
  ForEachSlotOfDatabase([buckets_too](QueueSlot* slot) {
    SpinLockAcquire(&slot->mutex);
    core::ResetHint(slot->hint);
    if (buckets_too) {
      slot->has_bucket = false;
      pg_atomic_write_u64(&slot->finished, 0);
      slot->last_flush_xid = InvalidTransactionId;
      slot->last_flush_amount = 0;
      for (pg_atomic_uint64& count : slot->counts) pg_atomic_write_u64(&count, 0);
      // A priority ring the earlier install's queue of this id asked for
      // is not this one's to have.
      pg_atomic_write_u64(&slot->wants_ring, 0);
      ReleaseCountSnapshot(slot->pending.window ? slot->pending.snapshot : -1);
      core::ForgetCount(slot->pending);
      pg_atomic_write_u64(&slot->refusals, 0);
    }
    SpinLockRelease(&slot->mutex);
  });
}

void SetQueueCapped(QueueSlot* slot, bool capped) {
  const uint32 value = capped ? 1 : 0;
  if (pg_atomic_read_u32(&slot->capped) != value) pg_atomic_write_u32(&slot->capped, value);
}

bool QueueCapped(const QueueSlot* slot) {
  return pg_atomic_read_u32(const_cast<pg_atomic_uint32*>(&slot->capped)) != 0;
}

void WantPriorityRing(QueueSlot* slot, int32 priority) {
  if (slot == nullptr) return;
  uint64 none = 0;
  if (pg_atomic_read_u64(&slot->wants_ring) != 0) return;
  (void)pg_atomic_compare_exchange_u64(&slot->wants_ring, &none,
                                       uint64{1} << 32 | static_cast<uint32>(priority));
}

std::optional<int32> TakeWantedPriorityRing(QueueSlot* slot) {
  if (slot == nullptr || pg_atomic_read_u64(&slot->wants_ring) == 0) return std::nullopt;
  const uint64 wanted = pg_atomic_exchange_u64(&slot->wants_ring, 0);
  if (wanted == 0) return std::nullopt;
  return static_cast<int32>(static_cast<uint32>(wanted));
}

void AddFinished(QueueSlot* slot, uint64 jobs) { pg_atomic_fetch_add_u64(&slot->finished, jobs); }

namespace {

// Whether the rows written by the flush in progress `xid` are in
// `snapshot`: it committed before the snapshot was taken. Stable: once true
// or false for a snapshot, so it stays. `xid` is running or has just ended
// (its commit callback has not run yet), so its status is in pg_xact.
bool FlushSeenBy(TransactionId xid, Snapshot snapshot) {
  return TransactionIdIsValid(xid) && !XidInMVCCSnapshot(xid, snapshot) &&
         TransactionIdDidCommit(xid);
}

// The same for the last flush that ended committed (or prepared): it
// committed, so only the snapshot decides, and no status is looked up (the
// flush may be older than what pg_xact still holds, for a queue that has
// had no completion since; XidInMVCCSnapshot answers an xid older than the
// snapshot's xmin without a lookup). A prepared flush rolled back later is
// taken as seen: its count is lost to done_recent, a statistic.
bool LastFlushSeenBy(TransactionId xid, Snapshot snapshot) {
  return !XidInMVCCSnapshot(xid, snapshot);
}

}  // namespace

uint64 UnflushedFinished(int32 queue_id) {
  if (Shared() == nullptr || slots == nullptr) return 0;
  const SlotKey key = KeyOf(queue_id);
  return Guard([&] {
    LWLockAcquire(SlotsLock(), LW_SHARED);
    auto* slot = static_cast<QueueSlot*>(hash_search(slots, &key, HASH_FIND, nullptr));
    uint64 jobs = 0;
    TransactionId flush_xid = InvalidTransactionId;
    TransactionId last_xid = InvalidTransactionId;
    uint64 flush_amount = 0;
    uint64 last_amount = 0;
    if (slot != nullptr) {
      // One instant of the slot: the flusher changes these together under
      // the same lock (MarkFlushes, SetFlushAmount, EndFlush).
      SpinLockAcquire(&slot->mutex);
      jobs = pg_atomic_read_u64(&slot->finished);
      flush_xid = slot->flush_xid;
      flush_amount = slot->flush_amount;
      last_xid = slot->last_flush_xid;
      last_amount = slot->last_flush_amount;
      SpinLockRelease(&slot->mutex);
    }
    LWLockRelease(SlotsLock());
    // The caller's snapshot decides which flushes its read of pgq.finished
    // saw: a flush it saw is not counted here too, and one it did not see is.
    if (slot != nullptr && (TransactionIdIsValid(flush_xid) || TransactionIdIsValid(last_xid))) {
      const Snapshot snapshot =
          ActiveSnapshotSet() ? GetActiveSnapshot() : GetTransactionSnapshot();
      if (FlushSeenBy(flush_xid, snapshot)) jobs -= std::min(jobs, flush_amount);
      if (TransactionIdIsValid(last_xid) && !LastFlushSeenBy(last_xid, snapshot)) {
        jobs += last_amount;
      }
    }
    return jobs;
  });
}

int MarkFlushes(FlushSlot* out, int capacity, int room) {
  if (Shared() == nullptr || slots == nullptr) return 0;
  const uint32 me = static_cast<uint32>(MyProcPid);
  return Guard([&] {
    // Readers tell by it whether their snapshot saw this flush's rows;
    // assigned only by a transaction that flushes something.
    TransactionId xid = InvalidTransactionId;
    int n = 0;
    LWLockAcquire(SlotsLock(), LW_SHARED);
    HASH_SEQ_STATUS scan;
    hash_seq_init(&scan, slots);
    while (auto* slot = static_cast<QueueSlot*>(hash_seq_search(&scan))) {
      if (slot->key.database != MyDatabaseId) continue;
      const uint64 finished = pg_atomic_read_u64(&slot->finished);
      uint32 flusher = 0;
      bool newly_marked = false;
      if (pg_atomic_read_u32(&slot->flusher) != me) {
        if (finished == 0 || room == 0) continue;
        if (!pg_atomic_compare_exchange_u32(&slot->flusher, &flusher, me)) continue;
        if (!TransactionIdIsValid(xid)) xid = GetTopTransactionId();
        SpinLockAcquire(&slot->mutex);
        slot->flush_xid = xid;
        slot->flush_amount = 0;
        SpinLockRelease(&slot->mutex);
        newly_marked = true;
        --room;
      }
      out[n++] =
          FlushSlot{slot, slot->key.queue_id, pg_atomic_read_u64(&slot->finished), newly_marked};
      if (n == capacity) {
        hash_seq_term(&scan);
        break;
      }
    }
    LWLockRelease(SlotsLock());
    return n;
  });
}

void SetFlushAmount(QueueSlot* slot, uint64 written) {
  SpinLockAcquire(&slot->mutex);
  slot->flush_amount = written;
  SpinLockRelease(&slot->mutex);
}

// Unguarded: runs in transaction callbacks; atomics and the slot's spinlock.
void EndFlush(QueueSlot* slot, uint64 flushed, bool committed) {
  SpinLockAcquire(&slot->mutex);
  if (committed && flushed > 0) {
    // Saturating: a new installation of the extension (ResetDatabaseSlots)
    // may have zeroed the count meanwhile.
    uint64 count = pg_atomic_read_u64(&slot->finished);
    while (!pg_atomic_compare_exchange_u64(&slot->finished, &count,
                                           count > flushed ? count - flushed : 0)) {
    }
    slot->last_flush_xid = slot->flush_xid;
    slot->last_flush_amount = flushed;
  }
  slot->flush_xid = InvalidTransactionId;
  slot->flush_amount = 0;
  SpinLockRelease(&slot->mutex);
  pg_atomic_write_u32(&slot->flusher, 0);
}

void AddCounts(QueueSlot* slot, const QueueCounts& counts) {
  for (int i = 0; i < kCounterKinds; ++i) {
    if (counts.values[i] > 0) pg_atomic_fetch_add_u64(&slot->counts[i], counts.values[i]);
  }
}

bool ReadCounts(int32 queue_id, QueueCounts* counts) {
  if (Shared() == nullptr || slots == nullptr) return false;
  const SlotKey key = KeyOf(queue_id);
  return Guard([&] {
    LWLockAcquire(SlotsLock(), LW_SHARED);
    auto* slot = static_cast<QueueSlot*>(hash_search(slots, &key, HASH_FIND, nullptr));
    if (slot != nullptr) {
      for (int i = 0; i < kCounterKinds; ++i) {
        counts->values[i] = pg_atomic_read_u64(&slot->counts[i]);
      }
    }
    LWLockRelease(SlotsLock());
    return slot != nullptr;
  });
}

int32 TakeRateTokens(QueueSlot* slot, double rate, int64 now_us, int32 want) {
  SpinLockAcquire(&slot->mutex);
  if (!slot->has_bucket) {
    slot->bucket = core::FullBucket(rate, now_us);
    slot->has_bucket = true;
  }
  const int32 taken = core::TakeTokens(slot->bucket, rate, now_us, want);
  SpinLockRelease(&slot->mutex);
  return taken;
}

void ReturnRateTokens(QueueSlot* slot, double rate, int32 unused) {
  SpinLockAcquire(&slot->mutex);
  core::ReturnTokens(slot->bucket, rate, unused);
  SpinLockRelease(&slot->mutex);
}

int64 MicrosUntilRateToken(QueueSlot* slot, double rate) {
  SpinLockAcquire(&slot->mutex);
  const int64 micros = core::MicrosUntilToken(slot->bucket, rate);
  SpinLockRelease(&slot->mutex);
  return micros;
}

// ---- Backpressure (core/pending_count.h)

core::Room ReservePending(QueueSlot* slot, int64 jobs, int64 limit, int64* unfinished) {
  SpinLockAcquire(&slot->mutex);
  const core::Room room = core::Reserve(slot->pending, jobs, limit);
  *unfinished = slot->pending.committed + slot->pending.reserved;
  SpinLockRelease(&slot->mutex);
  return room;
}

void GiveBackPending(QueueSlot* slot, int64 jobs) {
  SpinLockAcquire(&slot->mutex);
  core::GiveBack(slot->pending, jobs);
  SpinLockRelease(&slot->mutex);
  ConditionVariableBroadcast(&slot->room);
}

// Unguarded: runs in transaction callbacks; the slot's spinlock and the
// condition variable's (neither raises).
void CommitPending(QueueSlot* slot, int64 delta, int64 reserved, TransactionId xid) {
  SpinLockAcquire(&slot->mutex);
  const int32 snapshot = slot->pending.snapshot;
  const bool lower = core::Committed(slot->pending, delta, reserved, xid, [snapshot](uint32 x) {
    return CountSnapshotSaw(snapshot, x);
  });
  SpinLockRelease(&slot->mutex);
  if (lower) ConditionVariableBroadcast(&slot->room);
}

void ForgetPendingCounts() {
  ForEachSlotOfDatabase([](QueueSlot* slot) {
    SpinLockAcquire(&slot->mutex);
    // A count in progress is dropped too: its window missed this commit.
    const int32 snapshot = slot->pending.window ? slot->pending.snapshot : -1;
    core::ForgetCount(slot->pending);  // keeps the producers' reservations
    SpinLockRelease(&slot->mutex);
    ReleaseCountSnapshot(snapshot);
  });
}

bool BeginPendingCount(QueueSlot* slot) {
  SpinLockAcquire(&slot->mutex);
  const bool begun = core::BeginCount(slot->pending, MyProcPid);
  SpinLockRelease(&slot->mutex);
  return begun;
}

bool PublishPendingSnapshot(QueueSlot* slot, Snapshot snapshot) {
  const int index = TakeCountSnapshot(snapshot);
  SpinLockAcquire(&slot->mutex);
  const bool published =
      index >= 0 && core::SnapshotTaken(slot->pending, MyProcPid, index, [index](uint32 xid) {
        return CountSnapshotSaw(index, xid);
      });
  if (!published) {
    core::AbandonCount(slot->pending, MyProcPid);
  } else {
    // Who enters its commit from now on does so after the snapshot was
    // taken (its commit is not in it): the count waits for the others.
    slot->drain_generation = slot->commit_generation;
    slot->commit_generation ^= 1;
  }
  SpinLockRelease(&slot->mutex);
  if (!published) ReleaseCountSnapshot(index);
  return published;
}

core::CountResult EndPendingCount(QueueSlot* slot, int64 counted) {
  // A commit its snapshot saw may not have reached its callback yet (it
  // runs a moment after the commit is visible): wait for those, a few
  // microseconds each, before the count becomes the kept one.
  SpinLockAcquire(&slot->mutex);
  const uint32 drain = slot->drain_generation;
  SpinLockRelease(&slot->mutex);
  while (pg_atomic_read_u32(&slot->committing[drain]) != 0) {
    Guard([] {
      pg_usleep(100);
      CHECK_FOR_INTERRUPTS();
    });
  }
  SpinLockAcquire(&slot->mutex);
  const int32 snapshot = slot->pending.snapshot;
  const core::CountResult result = core::EndCount(slot->pending, MyProcPid, counted);
  SpinLockRelease(&slot->mutex);
  if (result.counted) ReleaseCountSnapshot(snapshot);
  ConditionVariableBroadcast(&slot->room);
  return result;
}

void AbandonPendingCount(QueueSlot* slot) {
  SpinLockAcquire(&slot->mutex);
  const bool mine = slot->pending.window && slot->pending.counter_pid == MyProcPid;
  const int32 snapshot = mine ? slot->pending.snapshot : -1;
  core::AbandonCount(slot->pending, MyProcPid);
  SpinLockRelease(&slot->mutex);
  ReleaseCountSnapshot(snapshot);
  if (mine) ConditionVariableBroadcast(&slot->room);
}

core::PendingCount ReadPendingCount(QueueSlot* slot) {
  SpinLockAcquire(&slot->mutex);
  core::PendingCount copy;
  copy.state = slot->pending.state;
  copy.window = slot->pending.window;
  copy.committed = slot->pending.committed;
  copy.reserved = slot->pending.reserved;
  SpinLockRelease(&slot->mutex);
  return copy;
}

bool WaitForRoom(QueueSlot* slot, int64 limit, long millis) {
  const auto room = [slot, limit](bool* known) {
    SpinLockAcquire(&slot->mutex);
    const bool has = core::HasRoom(slot->pending, limit);
    *known = slot->pending.state == core::PendingCount::kKnown;
    SpinLockRelease(&slot->mutex);
    return has;
  };
  bool known = false;
  // Prepared before the look: a broadcast after it is not lost.
  Guard([&] { ConditionVariablePrepareToSleep(&slot->room); });
  if (!room(&known) && known && millis > 0) {
    // Woken by a commit that lowered the count or changed the limit
    // (CommitPending, WakeRoomWaiters); a cancel or a termination raises.
    Guard([&] { (void)ConditionVariableTimedSleep(&slot->room, millis, PG_WAIT_EXTENSION); });
  }
  Guard([] { ConditionVariableCancelSleep(); });
  return room(&known);
}

int EnterCommit(QueueSlot* slot) {
  SpinLockAcquire(&slot->mutex);
  const uint32 generation = slot->commit_generation;
  pg_atomic_fetch_add_u32(&slot->committing[generation], 1);
  SpinLockRelease(&slot->mutex);
  return static_cast<int>(generation);
}

void LeaveCommit(QueueSlot* slot, int generation) {
  if (generation >= 0) pg_atomic_fetch_sub_u32(&slot->committing[generation], 1);
}

void WakeRoomWaiters(QueueSlot* slot) { ConditionVariableBroadcast(&slot->room); }

void AwaitCount(QueueSlot* slot, long millis) {
  // Broadcast when a count ends or is given up (EndPendingCount,
  // AbandonPendingCount); with no count in progress (a count that could
  // not begin: every count snapshot in use) the whole while, so that the
  // caller does not spin.
  Guard([&] {
    ConditionVariablePrepareToSleep(&slot->room);
    (void)ConditionVariableTimedSleep(&slot->room, millis, PG_WAIT_EXTENSION);
    ConditionVariableCancelSleep();
  });
}

bool TakeOverDeadCount(QueueSlot* slot) {
  SpinLockAcquire(&slot->mutex);
  const int32 pid = slot->pending.window ? slot->pending.counter_pid : 0;
  SpinLockRelease(&slot->mutex);
  if (pid == 0 || pid == MyProcPid) return false;
  if (Guard([pid] { return BackendPidGetProc(pid) != nullptr; })) return false;
  SpinLockAcquire(&slot->mutex);
  const bool gone = slot->pending.window && slot->pending.counter_pid == pid;
  const int32 snapshot = gone ? slot->pending.snapshot : -1;
  if (gone) core::AbandonCount(slot->pending, pid);
  SpinLockRelease(&slot->mutex);
  ReleaseCountSnapshot(snapshot);
  if (gone) ConditionVariableBroadcast(&slot->room);
  return gone;
}

void CountRefusal(QueueSlot* slot) { pg_atomic_fetch_add_u64(&slot->refusals, 1); }

uint64 Refusals(int32 queue_id) {
  if (Shared() == nullptr || slots == nullptr) return 0;
  const SlotKey key = KeyOf(queue_id);
  return Guard([&] {
    LWLockAcquire(SlotsLock(), LW_SHARED);
    auto* slot = static_cast<QueueSlot*>(hash_search(slots, &key, HASH_FIND, nullptr));
    const uint64 refused = slot == nullptr ? 0 : pg_atomic_read_u64(&slot->refusals);
    LWLockRelease(SlotsLock());
    return refused;
  });
}

}  // namespace pgq::pg
