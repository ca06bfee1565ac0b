// Per-queue state in shared memory (preloaded only): the claim hint
// (core/claim_hint.h) and the rate-limit bucket (core/rate_limit.h).
//
// A fixed-size shared hash keyed by (database, queue id), at most
// kMaxQueueSlots entries for the whole cluster; entries are never removed
// (a queue id is never reused within one installation of the extension, and
// CREATE EXTENSION resets the database's entries). A queue that finds the
// table full works without a slot: its claims scan from the start and its
// rate limit is kept in pgq.rate_buckets, as without preload.
#pragma once

#include <optional>

#include "core/claim_hint.h"
#include "core/pending_count.h"
#include "core/rate_limit.h"
#include "pg/pg.h"

namespace pgq::pg {

inline constexpr long kMaxQueueSlots = 4096;

struct QueueSlot;

// Space and lock requests; called from the shared-memory hooks.
Size QueueSlotsSize();
void InitQueueSlots();

// This database's slot for `queue_id`, created on first use; nullptr without
// shared memory or when the table is full. The pointer stays valid for the
// life of the server.
QueueSlot* FindQueueSlot(int32 queue_id);

// The hint operations of core/claim_hint.h, under the slot's spinlock.
core::ScanPlan PlanClaimScan(QueueSlot* slot, int64 now);
void PublishClaimScan(QueueSlot* slot, const core::ScanPlan& plan, const core::ScanResult& result);
// Lowers the hint to `due` (if not nullptr) and adds `later` to its alarm.
void UpdateClaimHint(QueueSlot* slot, const core::ClaimKey* due, const core::ClaimAlarm& later);
void ResetQueueHint(QueueSlot* slot);
// When the earliest job the hint's alarm knows of becomes due, or 0 when it
// knows of none (a waiting claim sleeps until then rather than a full
// recheck).
int64 NextAlarm(QueueSlot* slot);

// Forgets the hints of every queue of this database (next claims scan from
// the start) and, with `buckets_too`, their rate-limit buckets, unflushed
// completions and counters (a new installation of the extension, whose
// queue ids start again). Safe in a commit callback.
void ResetDatabaseSlots(bool buckets_too);

// Whether the queue has a max_running (written by its claims, read by the
// ledger at commit: a running job that left frees a place).
void SetQueueCapped(QueueSlot* slot, bool capped);
bool QueueCapped(const QueueSlot* slot);

// An enqueue of a priority the queue serves on no ring yet asks the
// maintenance for one (store/ring_jobs.h): one priority at a time a queue,
// kept until taken; nothing without a slot.
void WantPriorityRing(QueueSlot* slot, int32 priority);
std::optional<int32> TakeWantedPriorityRing(QueueSlot* slot);

// Completions counted in shared memory instead of one pgq.finished row per
// complete() (flushed into pgq.finished by maintenance, see service/maintain.cpp).
void AddFinished(QueueSlot* slot, uint64 jobs);
// Counted and not in pgq.finished as the caller's snapshot sees it (0
// without a slot): a flush whose rows the snapshot sees is not counted, one
// whose rows it does not see is, whether the flush is in progress,
// committing or done. So sum(pgq.finished) + this is exact at every instant
// of a flush, for any snapshot taken after the flush before it (an older
// one, in a long REPEATABLE READ transaction, may miss that flush's count).
uint64 UnflushedFinished(int32 queue_id);

// The flush: one transaction at a time writes a queue's count to
// pgq.finished. MarkFlushes marks this database's slots with unflushed
// completions as this backend's (at most `room` not already marked by it;
// those another backend marked are skipped) and returns them with their
// counts now. The count stays in shared memory until the flushing
// transaction ends: EndFlush subtracts what it wrote if it committed, and
// drops the mark either way. Safe in a commit callback.
struct FlushSlot {
  QueueSlot* slot;
  int32 queue_id;
  uint64 finished;  // the slot's count when marked
  bool newly_marked;
};
int MarkFlushes(FlushSlot* out, int capacity, int room);
// What the flushing transaction writes of the slot in all (before it
// commits: readers subtract it once they see its rows).
void SetFlushAmount(QueueSlot* slot, uint64 written);
void EndFlush(QueueSlot* slot, uint64 flushed, bool committed);

// What pgq.metrics() counts per queue since the server started, at the
// commit of the transaction that did it (pg/ledger.h, NoteCount).
enum Counter : int {
  kClaims = 0,
  kCompletions,
  kFailures,       // fail() calls that retried or dead-lettered a job
  kLeaseExpiries,  // leases that maintenance found expired
  kDeadLettered,   // jobs moved to pgq.dead_jobs: exhausted, expired or cancelled
  kCounterKinds
};
struct QueueCounts {
  uint64 values[kCounterKinds];
};
void AddCounts(QueueSlot* slot, const QueueCounts& counts);
// False without shared memory or a slot for the queue.
bool ReadCounts(int32 queue_id, QueueCounts* counts);

// Rate limit: takes up to `want` tokens of the queue's bucket (created full
// on first use, refilled at `rate` per second); ReturnRateTokens gives back
// what was not used. MicrosUntilRateToken: how long until the next token.
int32 TakeRateTokens(QueueSlot* slot, double rate, int64 now_us, int32 want);
void ReturnRateTokens(QueueSlot* slot, double rate, int32 unused);
int64 MicrosUntilRateToken(QueueSlot* slot, double rate);

// ---- Backpressure: the queue's unfinished jobs for its max_pending
// (core/pending_count.h, ADR 0029). The ledger reserves and commits
// (pg/ledger.h); service/backpressure.h counts and waits.

// Reserves `jobs` under `limit`; `*unfinished` the count with reservations.
core::Room ReservePending(QueueSlot* slot, int64 jobs, int64 limit, int64* unfinished);
void GiveBackPending(QueueSlot* slot, int64 jobs);
// A transaction that noted `delta` and reserved `reserved` committed (or
// prepared) as `xid`; wakes the waiters for room when the count went down.
// Safe in a commit callback.
void CommitPending(QueueSlot* slot, int64 delta, int64 reserved, TransactionId xid);
// Every count of this database unknown again (a transaction whose notes
// did not fit the ledger): counted again before the next reservation.
// Safe in a commit callback.
void ForgetPendingCounts();
// The count's window: false while another backend counts.
bool BeginPendingCount(QueueSlot* slot);
// Publishes the count's `snapshot`, taken after BeginPendingCount: from
// now on a commit that ends asks it whether it saw the commit. False (the
// count abandoned) when no room is left for it or the window lost commits.
bool PublishPendingSnapshot(QueueSlot* slot, Snapshot snapshot);
// `counted` unfinished jobs at the published snapshot, brought to now by
// the commits it did not see.
core::CountResult EndPendingCount(QueueSlot* slot, int64 counted);
void AbandonPendingCount(QueueSlot* slot);
// State, committed and reserved, at one instant.
core::PendingCount ReadPendingCount(QueueSlot* slot);
// Whether the count is known and below the low-water mark of `limit`;
// if not (and known), first sleeps up to `millis` or until a commit that
// lowers the count or changes the limit wakes it. The caller loops (reading
// the limit again). Raises on cancel and termination.
bool WaitForRoom(QueueSlot* slot, int64 limit, long millis);
// A transaction with notes for the slot's count reached its pre-commit
// (EnterCommit: its generation) or ended (LeaveCommit, in its commit or
// abort callback, after its delta was applied). Safe in callbacks.
int EnterCommit(QueueSlot* slot);
void LeaveCommit(QueueSlot* slot, int generation);
// Wakes the slot's waiters for room (a changed max_pending). Safe in a
// commit callback.
void WakeRoomWaiters(QueueSlot* slot);
// Sleeps up to `millis`, or until a count of the slot's queue ends (a
// backend waiting for another's count). Raises on cancel and termination.
void AwaitCount(QueueSlot* slot, long millis);
// A count whose backend ended without closing it (a FATAL: no unwinding)
// is given up, so that another can count; true if one was.
bool TakeOverDeadCount(QueueSlot* slot);
// Enqueues refused by max_pending (pgq.metrics()).
void CountRefusal(QueueSlot* slot);
uint64 Refusals(int32 queue_id);

}  // namespace pgq::pg
