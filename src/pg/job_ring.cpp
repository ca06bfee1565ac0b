#include "pg/job_ring.h"

#include <algorithm>
#include <unordered_map>

#include "core/fair_order.h"
#include "core/validate.h"
#include "pg/boundary.h"
#include "pg/segments.h"
#include "pg/settings.h"

extern "C" {
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "common/hashfn.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/bufmgr.h"
#include "storage/ipc.h"
#include "storage/lmgr.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/syscache.h"
}

namespace pgq::pg::job_ring {

namespace {

// pgq.max_ring_queues' largest value (pg/settings.cpp).
constexpr int kMaxLanes = 1024;
constexpr int kPassedMax = 256;
constexpr int kCancelledMax = 256;
constexpr int kReturnedMax = 4096;
constexpr int kLeasePartitions = 16;
// Rings whose lanes were taken back while their jobs may have dependents
// (and databases noted whole): their next lane is noted again (LaneOf).
constexpr int kNotedMax = 1024;
// Databases whose lanes were built since the lanes epoch moved on
// (EnsureLanes).
constexpr int kEnsuredMax = 64;
constexpr const char* kTranche = "pgq_job_ring";

// An entry the cursor passed while its inserter was in progress, and an
// entry handed out again: where it is (its segment, 0 .. segments - 1).
struct Passed {
  TransactionId xid;
  ItemPointerData tid;
  int16 segment;
};
struct Offer {
  ItemPointerData tid;
  int32 attempt;  // the attempt it is handed out as
  int16 segment;
};
// A tombstone's note: the entry, and the transaction that cancels it.
struct Tomb {
  ItemPointerData tid;
  int16 segment;
  TransactionId xid;
};

// A lane serves one ring (a queue has one per priority it serves on rings,
// store/ring_jobs.h), found by (database, ring_id).
struct Lane {
  Oid database;  // InvalidOid: free
  int32 ring_id;
  bool built;
  // The ring's first segment when built: a queue of the same id on another
  // ring (the extension dropped and created again) is built anew.
  Oid identity;
  LWLock* insert_lock;
  LWLock* claim_lock;
  // Under the insert lock: the segment entries go to, the current one of
  // the ledger's turn `insert_generation` (moved on by the first append
  // that knows a later turn, or by a truncation), and its last block.
  // Read without a lock by the claim, which only needs to know whether
  // entries have left the cursor's segment for good.
  volatile int insert_segment;
  int64 insert_generation;
  BlockNumber insert_block;
  // Under the claim lock: the segment the cursor walks and where in it,
  // and how many times it moved to the next segment since the lane was
  // built (its lap: the places of a fair order count laps, so that they
  // grow across the ring's turns; cursor_lap % segments == cursor_segment).
  int cursor_segment;
  ItemPointerData cursor;
  int64 cursor_lap;
  // Under the claim lock: the lane's fair order (ADR 0029; index into
  // Shared::fair_owner), -1: none, and its entries skipped and not yet
  // swept (monitoring's pending count).
  int32 fair;
  int64 fair_skipped;
  uint64 fair_weights_stamp;  // the Place::weights_stamp its keys are weighed by
  // Turns taken since the last scan of the due rows of pgq.job_rows
  // (FileRows): a scan is due each round of the keys.
  int64 fair_ring_claims;
  // Where the next scan of due rows starts: after this (run_at, id) when
  // the last was cut short at its limit, else from the first.
  Bound fair_rows_from;
  bool fair_rows_cut;
  // The fair order's RowsNamed(), for a look without the lock.
  volatile bool fair_rows_named;
  // The rows the last scan of due rows read, and the claims that asked for
  // a scan since (RowsWanted).
  int64 fair_rows_read;
  int64 fair_rows_asked;
  // Leases of the queue's running jobs in the map: held, and closing (taken
  // out by a transaction that has not ended: a completion that may roll
  // back). A cap counts both, as a table job counts as running until its
  // completion commits (RunningCount).
  pg_atomic_uint32 leases;
  pg_atomic_uint32 closing;
  // 1 once a child's enqueue named a job of this queue's ring (or, for
  // every lane of its database, the first completion after a start found
  // pgq.job_dependencies not empty): the ends of its jobs look for children
  // (NoteDependents). Another queue's children cost this one nothing.
  pg_atomic_uint32 dependents;
  // The start of the newest transaction that used the lane: of the idle
  // lanes, the least recently used is taken back first (TakeBack).
  pg_atomic_uint64 used;
  int passed_count;
  Passed passed[kPassedMax];
  int returned_count;
  Offer returned[kReturnedMax];
  // Entries out of the lane in transactions that have not ended (claims,
  // a tombstone's take-out of a given-back one), each of which comes back
  // to the given-back list if its transaction rolls back: a claim takes at
  // most what the list has room for beside them (kReturnedMax).
  pg_atomic_uint32 reserved;
  // Entries cancelled before a claim took them (tombstones): no claim hands
  // them out; the cursor drops each note when it passes it, the cancelling
  // transaction's end drops the notes of entries it took out of the
  // given-back list.
  int cancelled_count;
  Tomb cancelled[kCancelledMax];
};

// Hashed as bytes (HASH_BLOBS): no padding may be left unset.
struct LeaseKey {
  int64 database;
  int64 id;
};
struct LeaseSlot {
  LeaseKey key;
  Lease lease;
};

// How often at most a claim's spill, or an enqueue without a lane, is
// logged (Shared::spill_logged_at, no_lane_logged_at).
constexpr uint64 kSizingLogEveryUs = 60 * USECS_PER_SEC;

struct Shared {
  LWLock* lanes_lock;
  // Entries of the lease map, every database: while 0, a completion of a
  // table job asks the map nothing (complete_many of 100 would take 100
  // partition locks for nothing).
  pg_atomic_uint32 leases;
  // Moved on each time lanes are freed (their leases with them): a backend
  // that built its database's lanes before builds them again (Built).
  pg_atomic_uint32 lanes_epoch;
  // 1 once any lane noted dependents (NoteDependents): until then a ring
  // job's end asks nothing more of the lanes (one atomic read).
  pg_atomic_uint32 any_dependents;
  // When a claim's spill (jobs past the lease map's room run as rows) and
  // an enqueue that found no lane (its jobs went to pgq.job_rows) were last
  // logged (TimestampTz): each once a minute at most, for the whole server.
  pg_atomic_uint64 spill_logged_at;
  pg_atomic_uint64 no_lane_logged_at;
  pg_atomic_uint64 fair_logged_at;  // a fair queue found no fair order free
  // Under lanes_lock: rings whose lanes went with dependents noted
  // (ring_id -1: every ring of the database), noted again when their
  // lanes are taken. A database that finds the list full has its notes
  // made one (-1); only when other databases fill it is every lane taken
  // noted (noted_overflow).
  struct Noted {
    Oid database;
    int32 ring_id;
  };
  int noted_count;
  bool noted_overflow;
  Noted noted[kNotedMax];
  // Under lanes_lock: databases whose ring queues' lanes have been built
  // since the epoch given (EnsureLanes, once per database and epoch).
  struct Ensured {
    Oid database;
    uint32 epoch;
  };
  Ensured ensured[kEnsuredMax];
  // Which lanes each backend uses (a bit a lane, pin_words words a backend,
  // by PGPROC number): a lane is taken back only when nobody holds it
  // (Pin), so that an index LaneOf returned stays the queue's while the
  // call uses it, and to the transaction's end where it has undo notes for
  // the lane (Keep).
  pg_atomic_uint64* pins;
  int pin_words;
  int pin_slots;
  // Fair orders (ADR 0029): fair_count of fair_bytes each from fair_base,
  // fair_owner[i] the index + 1 of the lane that uses order i (0: free).
  int fair_count;
  Size fair_bytes;
  core::FairSizes fair_sizes;
  pg_atomic_uint32* fair_owner;
  char* fair_base;
  // Sizes read from the settings at the start (pg/settings.h).
  int lane_count;
  long lease_capacity;
  Lane lanes[1];  // lane_count of them
};

Size LanesSize(int lanes) {
  return MAXALIGN(
      add_size(offsetof(Shared, lanes), mul_size(sizeof(Lane), static_cast<Size>(lanes))));
}
int PinWords(int lanes) { return (lanes + 63) / 64; }
Size PinsSize(int lanes) {
  return MAXALIGN(
      mul_size(mul_size(static_cast<Size>(MaxBackends), PinWords(lanes)), sizeof(uint64)));
}
// A fair order's sizes from the settings: a key holds at most 64 offers
// (fewer when the cells are few), a sixteenth of the cells is kept for
// late entries.
core::FairSizes FairSizesOf() {
  const int32 offers = FairOffers();
  return core::FairSizes{FairKeys(), offers, std::clamp<int32>(offers / 16, 1, 64),
                         std::max<int32>(1, offers / 16)};
}
Size FairBytes() { return MAXALIGN(core::FairOrder::BytesFor(FairSizesOf())); }
Size FairSize() {
  return add_size(MAXALIGN(mul_size(static_cast<Size>(MaxFairQueues()), sizeof(pg_atomic_uint32))),
                  mul_size(static_cast<Size>(MaxFairQueues()), FairBytes()));
}
// Regular backends and background workers have PGPROC numbers below
// MaxBackends (auxiliary processes and prepared transactions come after).
Size SharedSize(int lanes) {
  return add_size(add_size(LanesSize(lanes), PinsSize(lanes)), FairSize());
}

Shared* shared = nullptr;
HTAB* leases = nullptr;
LWLockPadded* lease_locks = nullptr;
shmem_request_hook_type prev_request = nullptr;
shmem_startup_hook_type prev_startup = nullptr;

void Request() {
  if (prev_request != nullptr) prev_request();
  RequestAddinShmemSpace(add_size(MAXALIGN(SharedSize(MaxRingQueues())),
                                  hash_estimate_size(MaxRunningRingJobs(), sizeof(LeaseSlot))));
  RequestNamedLWLockTranche(kTranche, 1 + 2 * MaxRingQueues() + kLeasePartitions);
}

void Startup() {
  if (prev_startup != nullptr) prev_startup();
  LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
  bool found = false;
  const int lane_count = MaxRingQueues();
  const long capacity = MaxRunningRingJobs();
  shared =
      static_cast<Shared*>(ShmemInitStruct("pgq job ring lanes", SharedSize(lane_count), &found));
  LWLockPadded* locks = GetNamedLWLockTranche(kTranche);
  if (!found) {
    memset(shared, 0, SharedSize(lane_count));
    shared->lanes_lock = &locks[0].lock;
    pg_atomic_init_u32(&shared->leases, 0);
    pg_atomic_init_u32(&shared->lanes_epoch, 1);
    pg_atomic_init_u32(&shared->any_dependents, 0);
    pg_atomic_init_u64(&shared->spill_logged_at, 0);
    pg_atomic_init_u64(&shared->no_lane_logged_at, 0);
    pg_atomic_init_u64(&shared->fair_logged_at, 0);
    shared->lane_count = lane_count;
    shared->lease_capacity = capacity;
    shared->pins = reinterpret_cast<pg_atomic_uint64*>(reinterpret_cast<char*>(shared) +
                                                       LanesSize(lane_count));
    shared->pin_words = PinWords(lane_count);
    shared->pin_slots = MaxBackends;
    for (int w = 0; w < shared->pin_slots * shared->pin_words; ++w) {
      pg_atomic_init_u64(&shared->pins[w], 0);
    }
    char* fair = reinterpret_cast<char*>(shared) + LanesSize(lane_count) + PinsSize(lane_count);
    shared->fair_count = MaxFairQueues();
    shared->fair_bytes = FairBytes();
    shared->fair_sizes = FairSizesOf();
    shared->fair_owner = reinterpret_cast<pg_atomic_uint32*>(fair);
    shared->fair_base =
        fair + MAXALIGN(static_cast<Size>(shared->fair_count) * sizeof(pg_atomic_uint32));
    for (int i = 0; i < shared->fair_count; ++i) pg_atomic_init_u32(&shared->fair_owner[i], 0);
    for (int i = 0; i < lane_count; ++i) {
      shared->lanes[i].insert_lock = &locks[1 + 2 * i].lock;
      shared->lanes[i].claim_lock = &locks[2 + 2 * i].lock;
      pg_atomic_init_u32(&shared->lanes[i].leases, 0);
      pg_atomic_init_u32(&shared->lanes[i].closing, 0);
      pg_atomic_init_u32(&shared->lanes[i].dependents, 0);
      pg_atomic_init_u64(&shared->lanes[i].used, 0);
      pg_atomic_init_u32(&shared->lanes[i].reserved, 0);
      shared->lanes[i].fair = -1;
    }
  }
  lease_locks = locks + 1 + 2 * lane_count;
  HASHCTL info;
  memset(&info, 0, sizeof(info));
  info.keysize = sizeof(LeaseKey);
  info.entrysize = sizeof(LeaseSlot);
  info.num_partitions = kLeasePartitions;
  leases = ShmemInitHash("pgq job ring leases", capacity, capacity, &info,
                         HASH_ELEM | HASH_BLOBS | HASH_PARTITION);
  LWLockRelease(AddinShmemInitLock);
}

// ---- what this transaction must undo if it (or a subtransaction) aborts

enum class UndoKind : uint8 {
  kReturnLease,   // a lease taken out (closing, by `xid`): it holds again
  kRestoreLease,  // a lease changed (an extension): its value back
  kGiveBack,      // a claim (or a cancel that took an entry out of the given-back list)
  kUncancel,      // a tombstone noted in the lane: take it out
  kUntake,        // a tombstone of an entry taken out of the given-back list
  kDropLease,     // a claimed entry's lease (AppendClaimed): its row is gone with the claim
};
struct Undo {
  SubTransactionId subxact;
  UndoKind kind;
  LeaseKey key;
  Lease lease;
  int lane;
  Offer offer;
  // A tombstone's: its note's; a take-out's: the closer it set.
  TransactionId xid = InvalidTransactionId;
};
std::vector<Undo>* undo = nullptr;

LWLock* LeaseLock(uint32 hash) { return &lease_locks[hash % kLeasePartitions].lock; }

// A lane's count of the leases in one state: held, or closing.
pg_atomic_uint32& CountOf(const Lease& lease) {
  Lane& lane = shared->lanes[lease.lane];
  return TransactionIdIsValid(lease.closer_xid) ? lane.closing : lane.leases;
}

// One entry of a transaction that ended is no longer out of `lane`
// (Lane::reserved); never below 0.
void Unreserve(Lane& lane) {
  uint32 had = pg_atomic_read_u32(&lane.reserved);
  while (had > 0 && !pg_atomic_compare_exchange_u32(&lane.reserved, &had, had - 1)) {
  }
}

// False when the map holds its capacity (pgq.max_running_ring_jobs): the
// count is the limit, not the shared hash, which would go on taking the
// server's spare shared memory.
bool PutLease(const LeaseKey& key, const Lease& lease) {
  const uint32 hash = get_hash_value(leases, &key);
  LWLockAcquire(LeaseLock(hash), LW_EXCLUSIVE);
  bool found;
  LeaseSlot* slot =
      static_cast<LeaseSlot*>(hash_search_with_hash_value(leases, &key, hash, HASH_FIND, &found));
  bool entered = slot != nullptr;
  if (slot == nullptr && pg_atomic_fetch_add_u32(&shared->leases, 1) < shared->lease_capacity) {
    slot = static_cast<LeaseSlot*>(
        hash_search_with_hash_value(leases, &key, hash, HASH_ENTER_NULL, &found));
    if (slot != nullptr) {
      pg_atomic_fetch_add_u32(&CountOf(lease), 1);
      entered = true;
    }
  }
  if (slot == nullptr && !entered) {
    // Over the capacity (or out of shared memory): the count goes back.
    pg_atomic_fetch_sub_u32(&shared->leases, 1);
  }
  if (slot != nullptr) {
    if (found) pg_atomic_fetch_sub_u32(&CountOf(slot->lease), 1);
    if (found) pg_atomic_fetch_add_u32(&CountOf(lease), 1);
    slot->lease = lease;
  }
  LWLockRelease(LeaseLock(hash));
  return entered;
}

// Takes the slot out of the map (its partition lock held exclusively).
void RemoveSlot(LeaseSlot* slot, uint32 hash) {
  pg_atomic_fetch_sub_u32(&shared->leases, 1);
  pg_atomic_fetch_sub_u32(&CountOf(slot->lease), 1);
  const LeaseKey key = slot->key;
  bool found;
  hash_search_with_hash_value(leases, &key, hash, HASH_REMOVE, &found);
}

void DropLease(const LeaseKey& key) {
  const uint32 hash = get_hash_value(leases, &key);
  LWLockAcquire(LeaseLock(hash), LW_EXCLUSIVE);
  bool found;
  LeaseSlot* slot =
      static_cast<LeaseSlot*>(hash_search_with_hash_value(leases, &key, hash, HASH_FIND, &found));
  if (found) RemoveSlot(slot, hash);
  LWLockRelease(LeaseLock(hash));
}

// What a lease's closer says (its partition lock held: only reads).
enum class Closer { kNone, kOurs, kInProgress, kCommitted, kAborted };
Closer CloserOf(const Lease& lease) {
  const TransactionId xid = lease.closer_xid;
  if (!TransactionIdIsValid(xid)) return Closer::kNone;
  if (TransactionIdIsCurrentTransactionId(xid)) return Closer::kOurs;
  if (TransactionIdIsInProgress(xid)) return Closer::kInProgress;
  return TransactionIdDidCommit(xid) ? Closer::kCommitted : Closer::kAborted;
}

// The lease's closer ended `closer` (kCommitted or kAborted; the partition
// lock held exclusively): committed, the lease goes; rolled back, it holds
// again. Its own transaction's end does the same (AtXactEnd, UndoOne); this
// is for whoever meets it first (a prepared transaction's, or one that
// ended a moment ago). Whether it is still in the map.
bool Settle(LeaseSlot* slot, uint32 hash, Closer closer) {
  if (closer == Closer::kCommitted) {
    RemoveSlot(slot, hash);
    return false;
  }
  pg_atomic_fetch_sub_u32(&CountOf(slot->lease), 1);
  slot->lease.closer_xid = InvalidTransactionId;
  pg_atomic_fetch_add_u32(&CountOf(slot->lease), 1);
  return true;
}

// Runs fn(slot) on the slot of `key` (nullptr: none) under its partition's
// lock held exclusively. INVARIANT: fn neither throws nor raises.
template <typename Fn>
void WithSlot(const LeaseKey& key, Fn&& fn) {
  const uint32 hash = get_hash_value(leases, &key);
  LWLockAcquire(LeaseLock(hash), LW_EXCLUSIVE);
  bool found;
  LeaseSlot* slot =
      static_cast<LeaseSlot*>(hash_search_with_hash_value(leases, &key, hash, HASH_FIND, &found));
  fn(found ? slot : nullptr, hash);
  LWLockRelease(LeaseLock(hash));
}

// The end of this transaction's take-out of a lease (`u`, kReturnLease):
// committed, the lease goes; rolled back, it holds again — unless whoever
// met it first settled it already (Settle).
void EndTakeOut(const Undo& u, bool committed) {
  WithSlot(u.key, [&](LeaseSlot* slot, uint32 hash) {
    if (slot == nullptr || slot->lease.closer_xid != u.xid) return;
    (void)Settle(slot, hash, committed ? Closer::kCommitted : Closer::kAborted);
  });
}

bool SameEntry(const Offer& a, const Offer& b) {
  return a.segment == b.segment && ItemPointerEquals(const_cast<ItemPointerData*>(&a.tid),
                                                     const_cast<ItemPointerData*>(&b.tid));
}
bool SameEntry(const Tomb& a, const Offer& b) {
  return a.segment == b.segment && ItemPointerEquals(const_cast<ItemPointerData*>(&a.tid),
                                                     const_cast<ItemPointerData*>(&b.tid));
}

// Takes out the note of `entry` made by `xid` (the claim lock held);
// whether there was one.
bool DropTomb(Lane& lane, const Offer& entry, TransactionId xid) {
  for (int i = 0; i < lane.cancelled_count; ++i) {
    if (lane.cancelled[i].xid != xid || !SameEntry(lane.cancelled[i], entry)) continue;
    lane.cancelled[i] = lane.cancelled[--lane.cancelled_count];
    return true;
  }
  return false;
}

void UndoOne(const Undo& u) {
  if (u.kind == UndoKind::kReturnLease) {
    EndTakeOut(u, false);
    return;
  }
  if (u.kind == UndoKind::kRestoreLease) {
    // An extension: the lease's end as it was (whoever has taken it out
    // since keeps it taken out).
    WithSlot(u.key, [&](LeaseSlot* slot, uint32) {
      if (slot != nullptr) slot->lease.lease_until = u.lease.lease_until;
    });
    return;
  }
  if (u.kind == UndoKind::kDropLease) {
    // Only this claim's: its row is pending again as soon as the abort is
    // in the commit log (before this callback), and another claim may have
    // taken it and put its own lease under the same key meanwhile.
    WithSlot(u.key, [&](LeaseSlot* slot, uint32 hash) {
      if (slot != nullptr && slot->lease.claim_xid == u.lease.claim_xid) RemoveSlot(slot, hash);
    });
    return;
  }
  if (u.kind == UndoKind::kGiveBack) DropLease(u.key);
  Lane& lane = shared->lanes[u.lane];
  LWLockAcquire(lane.claim_lock, LW_EXCLUSIVE);
  if (lane.database == u.key.database && lane.ring_id == u.lease.ring_id) {
    bool give_back = u.kind == UndoKind::kGiveBack || u.kind == UndoKind::kUntake;
    if (u.kind == UndoKind::kUncancel || u.kind == UndoKind::kUntake) {
      // A claim that passed a noted entry dropped the note (taking the
      // cancel for done): then the entry is given back.
      const bool noted = DropTomb(lane, u.offer, u.xid);
      if (u.kind == UndoKind::kUncancel) give_back = !noted;
    }
    if (give_back && lane.returned_count < kReturnedMax) {
      lane.returned[lane.returned_count++] = u.offer;
    } else if (give_back) {
      // Only an entry whose tombstone rolled back after a claim passed its
      // note is given back without room set aside (Lane::reserved); it
      // comes back at the queue's next rebuild.
      elog(WARNING, "pgq: queue %d has too many jobs to give back", u.lease.queue_id);
    }
    if (u.kind == UndoKind::kGiveBack || u.kind == UndoKind::kUntake) Unreserve(lane);
  }
  LWLockRelease(lane.claim_lock);
}

// Whether the entry is a tombstone's (under the claim lock); if so it is
// dropped from the set (`drop`: the cursor passes it for good).
bool Cancelled(Lane& lane, const Offer& entry, bool drop) {
  for (int i = 0; i < lane.cancelled_count; ++i) {
    if (!SameEntry(lane.cancelled[i], entry)) continue;
    if (drop) lane.cancelled[i] = lane.cancelled[--lane.cancelled_count];
    return true;
  }
  return false;
}

void EndUndo(XactEvent event) {
  switch (event) {
    case XACT_EVENT_ABORT:
    case XACT_EVENT_PARALLEL_ABORT:
      // In the order they were done: entries given back keep claim order.
      for (const Undo& u : *undo) UndoOne(u);
      undo->clear();
      break;
    case XACT_EVENT_COMMIT:
    case XACT_EVENT_PARALLEL_COMMIT:
    case XACT_EVENT_PREPARE:
      for (const Undo& u : *undo) {
        // A prepared transaction's leases stay closing until whoever meets
        // them after its COMMIT or ROLLBACK PREPARED settles them (Settle;
        // the maintenance's pass does, at the latest).
        if (u.kind == UndoKind::kReturnLease && event != XACT_EVENT_PREPARE) EndTakeOut(u, true);
        if (event == XACT_EVENT_PREPARE &&
            (u.kind == UndoKind::kGiveBack || u.kind == UndoKind::kDropLease)) {
          // A claim's lease: marked, so that a ROLLBACK PREPARED, which no
          // callback of ours sees, is found by the maintenance (Expired).
          WithSlot(u.key, [&](LeaseSlot* slot, uint32) {
            if (slot != nullptr && slot->lease.claim_xid == u.lease.claim_xid) {
              slot->lease.prepared = true;
            }
          });
        }
        if (u.kind == UndoKind::kGiveBack) Unreserve(shared->lanes[u.lane]);
        if (u.kind == UndoKind::kUntake) {
          Unreserve(shared->lanes[u.lane]);
          // Its closure is committed: the note of an entry no claim will
          // meet again (it was out of the cursor's way) goes.
          Lane& lane = shared->lanes[u.lane];
          LWLockAcquire(lane.claim_lock, LW_EXCLUSIVE);
          if (lane.database == u.key.database && lane.ring_id == u.lease.ring_id) {
            (void)DropTomb(lane, u.offer, u.xid);
          }
          LWLockRelease(lane.claim_lock);
        }
      }
      undo->clear();
      break;
    default:
      break;
  }
}

// ---- pins (Shared::pins)

bool pinned_any = false;  // this transaction pinned a lane

pg_atomic_uint64* MyPins() {
  return shared->pins + static_cast<Size>(MyProc->pgprocno) * shared->pin_words;
}

// How many calls of this backend hold each lane now (LaneOf pins, CallPin
// lets go): a call within a call keeps the outer one's pin.
uint16 pin_depth[kMaxLanes] = {};

// Pins lane `index` (lanes_lock held, either mode: only this backend writes
// its words, TakeBack reads them under the lock held exclusively), until
// the call lets go (Release) or, if the transaction keeps it (Keep), until
// the transaction ends.
void Pin(int index) {
  pg_atomic_uint64& word = MyPins()[index / 64];
  const uint64 bit = uint64{1} << (index % 64);
  const uint64 had = pg_atomic_read_u64(&word);
  if ((had & bit) == 0) pg_atomic_write_u64(&word, had | bit);
  ++pin_depth[index];
  pinned_any = true;
}

// Whether any backend's transaction holds lane `index` (lanes_lock held
// exclusively).
bool Pinned(int index) {
  const uint64 bit = uint64{1} << (index % 64);
  for (int slot = 0; slot < shared->pin_slots; ++slot) {
    if (pg_atomic_read_u64(&shared->pins[slot * shared->pin_words + index / 64]) & bit) return true;
  }
  return false;
}

// Lanes this transaction keeps pinned to its end (Keep): it has undo notes
// for them (claims, tombstones), which its end applies to the lane.
uint64 kept[kMaxLanes / 64] = {};

void Keep(int index) { kept[index / 64] |= uint64{1} << (index % 64); }

// Lets go of the pin of a call that left nothing to undo in the lane (its
// rows, committed or not, are what a lane built again reads: Rebuild);
// the lane stays pinned while an outer call holds it too.
void Release(int index) {
  const uint64 bit = uint64{1} << (index % 64);
  if (pin_depth[index] > 0) --pin_depth[index];
  if (pin_depth[index] > 0 || (kept[index / 64] & bit)) return;
  pg_atomic_uint64& word = MyPins()[index / 64];
  pg_memory_barrier();  // what the call did to the lane, before it may look free
  pg_atomic_write_u64(&word, pg_atomic_read_u64(&word) & ~bit);
}

// A lane pinned for the span of one call (LaneOf's pin let go at its end).
struct CallPin {
  int index;
  ~CallPin() {
    if (index >= 0) Release(index);
  }
};

// At the end of the transaction, after its undo: what it did to its lanes
// is done before they may look free.
void Unpin() {
  if (!pinned_any) return;
  pg_memory_barrier();
  pg_atomic_uint64* mine = MyPins();
  for (int w = 0; w < shared->pin_words; ++w) pg_atomic_write_u64(&mine[w], 0);
  memset(kept, 0, sizeof(kept));
  memset(pin_depth, 0, sizeof(pin_depth));
  pinned_any = false;
}

void AtXactEnd(XactEvent event, void*) {
  switch (event) {
    case XACT_EVENT_ABORT:
    case XACT_EVENT_PARALLEL_ABORT:
    case XACT_EVENT_COMMIT:
    case XACT_EVENT_PARALLEL_COMMIT:
    case XACT_EVENT_PREPARE:
      break;
    default:
      return;
  }
  if (undo != nullptr && !undo->empty()) EndUndo(event);
  Unpin();
}

void AtSubXactEnd(SubXactEvent event, SubTransactionId sub, SubTransactionId parent, void*) {
  if (undo == nullptr || undo->empty()) return;
  if (event == SUBXACT_EVENT_ABORT_SUB) {
    auto first = undo->end();
    while (first != undo->begin() && (first - 1)->subxact == sub) --first;
    for (auto it = first; it != undo->end(); ++it) UndoOne(*it);
    undo->erase(first, undo->end());
  } else if (event == SUBXACT_EVENT_COMMIT_SUB) {
    for (Undo& u : *undo) {
      if (u.subxact == sub) u.subxact = parent;
    }
  }
}

// Room for `more` notes, made before any lock is taken: nothing done
// under a lock may throw.
void WatchXactEnds() {
  if (undo != nullptr) return;
  Guard([] {
    RegisterXactCallback(AtXactEnd, nullptr);
    RegisterSubXactCallback(AtSubXactEnd, nullptr);
  });
  undo = new std::vector<Undo>();
}

void ReserveUndo(size_t more) {
  WatchXactEnds();
  undo->reserve(undo->size() + more);
}

// ---- rows

// A slot on the relation's own descriptor pins it in the resource owner,
// one entry per slot: 100 in one statement made the owner's array a slow
// hash (measured: 40 us a job). Batches use an unpinned copy.
void InsertRows(Relation rel, HeapTuple* tuples, int count, int options) {
  const CommandId cid = GetCurrentCommandId(true);
  if (count == 1) {
    heap_insert(rel, tuples[0], cid, options, nullptr);
    return;
  }
  TupleDesc desc = CreateTupleDescCopy(RelationGetDescr(rel));
  TupleTableSlot** slots = static_cast<TupleTableSlot**>(palloc(sizeof(void*) * count));
  for (int i = 0; i < count; ++i) {
    slots[i] = MakeSingleTupleTableSlot(desc, &TTSOpsHeapTuple);
    ExecStoreHeapTuple(tuples[i], slots[i], false);
  }
  heap_multi_insert(rel, slots, count, cid, options, nullptr);
  for (int i = 0; i < count; ++i) {
    tuples[i]->t_self = slots[i]->tts_tid;
    ExecDropSingleTupleTableSlot(slots[i]);
  }
}

// A row of segment `segment` of the ring (its segment column: first +
// segment, the leaf's partition bound: the rows are placed without routing).
struct Row {
  Datum values[kColumns];
  bool nulls[kColumns];
  Row(const Place& place, int segment, char kind, int64 id, int32 attempt) {
    for (int i = 0; i < kColumns; ++i) {
      values[i] = 0;
      nulls[i] = true;
    }
    Set(kRing, Int32GetDatum(place.ring_id));
    Set(kSegment, Int16GetDatum(static_cast<int16>(place.first + segment)));
    Set(kKind, CharGetDatum(kind));
    Set(kId, Int64GetDatum(id));
    Set(kAttempt, Int32GetDatum(attempt));
  }
  void Set(int column, Datum value) {
    values[column - 1] = value;
    nulls[column - 1] = false;
  }
};

// What the claim scan and the rebuild see of a row's inserter.
enum class Seen { kCommitted, kInProgress, kGone };

Seen Look(HeapTupleHeader tuple, Buffer buffer) {
  if (HeapTupleHeaderXminCommitted(tuple)) return Seen::kCommitted;
  if (HeapTupleHeaderXminInvalid(tuple)) return Seen::kGone;
  const TransactionId xmin = HeapTupleHeaderGetRawXmin(tuple);
  if (TransactionIdIsCurrentTransactionId(xmin)) return Seen::kCommitted;
  if (TransactionIdIsInProgress(xmin)) return Seen::kInProgress;
  if (TransactionIdDidCommit(xmin)) {
    HeapTupleSetHintBits(tuple, buffer, HEAP_XMIN_COMMITTED, xmin);
    return Seen::kCommitted;
  }
  HeapTupleSetHintBits(tuple, buffer, HEAP_XMIN_INVALID, InvalidTransactionId);
  return Seen::kGone;
}

// The row at `offset` of a page read under its buffer lock, pointing into
// the page; false if the line pointer holds none.
bool RowAt(Page page, BlockNumber block, OffsetNumber offset, Oid relid, HeapTupleData* tuple) {
  if (offset < FirstOffsetNumber || offset > PageGetMaxOffsetNumber(page)) return false;
  ItemId item = PageGetItemId(page, offset);
  if (!ItemIdIsNormal(item)) return false;
  tuple->t_data = reinterpret_cast<HeapTupleHeader>(PageGetItem(page, item));
  tuple->t_len = ItemIdGetLength(item);
  ItemPointerSet(&tuple->t_self, block, offset);
  tuple->t_tableOid = relid;
  return true;
}

char KindOf(HeapTupleData* tuple, TupleDesc desc) {
  bool is_null;
  return DatumGetChar(heap_getattr(tuple, kKind, desc, &is_null));
}
int64 IdOf(HeapTupleData* tuple, TupleDesc desc) {
  bool is_null;
  return DatumGetInt64(heap_getattr(tuple, kId, desc, &is_null));
}
// An entry's column that a ring made before it lacks (a group key, a
// dedupe key and period): its value, 0 for none (NULL, or no such column).
Datum OptionalOf(HeapTupleData* tuple, TupleDesc desc, int column) {
  if (desc->natts < column) return 0;
  bool is_null;
  const Datum value = heap_getattr(tuple, column, desc, &is_null);
  return is_null ? 0 : value;
}
Datum GroupKeyOf(HeapTupleData* tuple, TupleDesc desc) {
  return OptionalOf(tuple, desc, kGroupKey);
}
bool GroupedOf(HeapTupleData* tuple, TupleDesc desc) { return GroupKeyOf(tuple, desc) != 0; }
Datum DedupeKeyOf(HeapTupleData* tuple, TupleDesc desc) {
  return OptionalOf(tuple, desc, kDedupeKey);
}
bool KeyedOf(HeapTupleData* tuple, TupleDesc desc) { return DedupeKeyOf(tuple, desc) != 0; }
Datum LastErrorOf(HeapTupleData* tuple, TupleDesc desc) {
  return OptionalOf(tuple, desc, kLastError);
}
// The claim's number a claimed entry and its rows carry (kEntry); 0: none.
int64 ClaimNoOf(HeapTupleData* tuple, TupleDesc desc) {
  if (desc->natts < kEntry) return 0;
  bool is_null;
  const Datum value = heap_getattr(tuple, kEntry, desc, &is_null);
  return is_null ? 0 : DatumGetInt64(value);
}
Datum DedupeForOf(HeapTupleData* tuple, TupleDesc desc) {
  return OptionalOf(tuple, desc, kDedupeFor);
}
Datum TraceContextOf(HeapTupleData* tuple, TupleDesc desc) {
  return OptionalOf(tuple, desc, kTraceContext);
}
int32 AttemptOf(HeapTupleData* tuple, TupleDesc desc) {
  bool is_null;
  return DatumGetInt32(heap_getattr(tuple, kAttempt, desc, &is_null));
}

// Calls `visit(&tuple, buffer)` for each row of `block` of `rel` from
// offset `first` on, the buffer share-locked, until it answers false.
template <typename Visit>
void VisitBlock(Relation rel, BlockNumber block, OffsetNumber first, Visit&& visit) {
  Buffer buffer = ReadBuffer(rel, block);
  LockBuffer(buffer, BUFFER_LOCK_SHARE);
  Page page = BufferGetPage(buffer);
  const OffsetNumber max = PageGetMaxOffsetNumber(page);
  for (OffsetNumber offset = first; offset <= max; ++offset) {
    HeapTupleData tuple;
    if (RowAt(page, block, offset, RelationGetRelid(rel), &tuple) && !visit(&tuple, buffer)) break;
  }
  UnlockReleaseBuffer(buffer);
}

// Calls `visit(&tuple, buffer)` for the row at `tid` of `rel`, if any.
template <typename Visit>
void VisitRow(Relation rel, ItemPointerData tid, Visit&& visit) {
  Buffer buffer = ReadBuffer(rel, ItemPointerGetBlockNumber(&tid));
  LockBuffer(buffer, BUFFER_LOCK_SHARE);
  HeapTupleData tuple;
  if (RowAt(BufferGetPage(buffer), ItemPointerGetBlockNumber(&tid),
            ItemPointerGetOffsetNumber(&tid), RelationGetRelid(rel), &tuple)) {
    visit(&tuple, buffer);
  }
  UnlockReleaseBuffer(buffer);
}

// ---- fair lanes (ADR 0029)

// A fair order's place of an entry: its lap (the cursor's count of
// segments entered, so places grow across the ring's turns), block and
// offset, packed so that a later entry has a larger place.
constexpr int kFairOffsetBits = 11;  // MaxHeapTuplesPerPage is 1,165 at 32 kB pages
constexpr int kFairBlockBits = 29;   // 4 TB segments at 8 kB pages
constexpr int kFairLapShift = kFairOffsetBits + kFairBlockBits;
// Laps are renumbered (Rebase) long before they would need more than the
// 24 bits left to them.
constexpr int64 kFairLapRebase = int64{1} << 22;

core::FairPlace FairPlaceOf(int64 lap, BlockNumber block, OffsetNumber offset) {
  if (block >= (BlockNumber{1} << kFairBlockBits)) {
    Raise(ERRCODE_PROGRAM_LIMIT_EXCEEDED, "a segment of a fair queue's ring is too large",
          "It has more than " + std::to_string(BlockNumber{1} << kFairBlockBits) + " blocks.");
  }
  return (static_cast<uint64>(lap) << kFairLapShift) |
         (static_cast<uint64>(block) << kFairOffsetBits) | static_cast<uint64>(offset);
}
core::FairPlace FairPlaceOf(int64 lap, ItemPointerData tid) {
  return FairPlaceOf(lap, ItemPointerGetBlockNumber(&tid), ItemPointerGetOffsetNumber(&tid));
}
struct FairAt {
  int64 lap;
  BlockNumber block;
  OffsetNumber offset;
};
FairAt FairAtOf(core::FairPlace place) {
  return FairAt{
      static_cast<int64>(place >> kFairLapShift),
      static_cast<BlockNumber>((place >> kFairOffsetBits) & ((uint64{1} << kFairBlockBits) - 1)),
      static_cast<OffsetNumber>(place & ((uint64{1} << kFairOffsetBits) - 1))};
}
// The lap of `segment` at or behind the cursor: entries behind the cursor
// lie in the last `segments` laps (a segment is reused only once every
// entry of it is closed, and then none is held).
int64 LapBehind(const Lane& lane, int segment, int segments) {
  return lane.cursor_lap - (lane.cursor_segment - segment + segments) % segments;
}

uint64 FairKeyOfBytes(const char* data, size_t length) {
  const uint64 hash = hash_bytes_extended(reinterpret_cast<const unsigned char*>(data),
                                          static_cast<int>(length), 0);
  return hash == 0 ? 1 : hash;
}

// The key an entry is filed under: a hash of its group key (0: none).
// Keys of equal hash share a turn (a 64-bit hash: in practice never).
uint64 FairKeyOf(HeapTupleData* tuple, TupleDesc desc) {
  const Datum key = GroupKeyOf(tuple, desc);
  if (key == 0) return 0;
  text* value = DatumGetTextPP(key);
  return FairKeyOfBytes(VARDATA_ANY(value), VARSIZE_ANY_EXHDR(value));
}

// A key's weight in `place`'s queue (pgq.set_group_weight; 1 by default).
uint32 WeightOf(const Place& place, uint64 key) {
  if (!place.weights) return 1;
  const auto it = place.weights->find(key);
  return it == place.weights->end() ? 1 : it->second;
}

core::FairOrder* FairOf(const Lane& lane) {
  if (lane.fair < 0) return nullptr;
  return reinterpret_cast<core::FairOrder*>(shared->fair_base +
                                            static_cast<Size>(lane.fair) * shared->fair_bytes);
}

// Gives lane `index` an empty fair order (its claim lock held, or the lane
// being built); false if none is free or its database holds its share
// (pgq.max_fair_queues_per_database). Whatever lies behind the cursor is
// handed out, given back or passed: the cursor files from where it is.
// Under lanes_lock, so that a database's share is exact (taken under a
// claim lock: every path that holds lanes_lock only tries claim locks).
bool AttachFair(Lane& lane, int index) {
  LWLockAcquire(shared->lanes_lock, LW_EXCLUSIVE);
  // An order whose lane holds nothing in it (no key: nothing filed, skipped
  // or kept for its rate limit) is taken back from that lane, whose next
  // fair claim asks for one again; its claim lock only tried (lanes_lock is
  // held, and the caller holds its own lane's).
  const auto take_back = [&](int i) {
    const uint32 owner = pg_atomic_read_u32(&shared->fair_owner[i]);
    if (owner == 0 || static_cast<int>(owner) - 1 == index) return false;
    Lane& other = shared->lanes[owner - 1];
    if (!LWLockConditionalAcquire(other.claim_lock, LW_EXCLUSIVE)) return false;
    const bool empty = other.fair == i && FairOf(other)->KeysInUse() == 0;
    if (empty) {
      other.fair = -1;
      other.fair_skipped = 0;
      pg_atomic_write_u32(&shared->fair_owner[i], 0);
    }
    LWLockRelease(other.claim_lock);
    return empty;
  };
  const auto ours_of = [&](int i) {
    const uint32 owner = pg_atomic_read_u32(&shared->fair_owner[i]);
    return owner != 0 && shared->lanes[owner - 1].database == lane.database;
  };
  int ours = 0, free_order = -1;
  for (int i = 0; i < shared->fair_count; ++i) {
    if (pg_atomic_read_u32(&shared->fair_owner[i]) == 0) {
      if (free_order < 0) free_order = i;
    } else if (ours_of(i)) {
      ++ours;
    }
  }
  // At its share: one of its own orders left empty; none free: anyone's.
  if (ours >= MaxFairQueuesPerDatabase()) {
    free_order = -1;
    for (int i = 0; i < shared->fair_count && free_order < 0; ++i) {
      if (ours_of(i) && take_back(i)) {
        free_order = i;
        --ours;
      }
    }
  } else if (free_order < 0) {
    for (int i = 0; i < shared->fair_count && free_order < 0; ++i) {
      const bool was_ours = ours_of(i);
      if (take_back(i)) {
        free_order = i;
        if (was_ours) --ours;
      }
    }
  }
  const bool attached = free_order >= 0 && ours < MaxFairQueuesPerDatabase();
  if (attached) {
    pg_atomic_write_u32(&shared->fair_owner[free_order], static_cast<uint32>(index) + 1);
    lane.fair = free_order;
  }
  LWLockRelease(shared->lanes_lock);
  if (!attached) return false;
  (void)core::FairOrder::Make(FairOf(lane), shared->fair_sizes);
  lane.fair_skipped = 0;
  lane.fair_weights_stamp = 0;
  lane.fair_ring_claims = 0;
  lane.fair_rows_cut = false;
  lane.fair_rows_named = false;
  lane.fair_rows_read = 0;
  lane.fair_rows_asked = 0;
  return true;
}

void DetachFair(Lane& lane) {
  if (lane.fair < 0) return;
  pg_atomic_write_u32(&shared->fair_owner[lane.fair], 0);
  lane.fair = -1;
  lane.fair_skipped = 0;
  lane.fair_ring_claims = 0;
  lane.fair_rows_cut = false;
  lane.fair_rows_named = false;
}

// The cursor enters the next segment (the claim lock held).
void NextCursorSegment(Lane& lane, int segments) {
  lane.cursor_segment = (lane.cursor_segment + 1) % segments;
  ItemPointerSet(&lane.cursor, 0, FirstOffsetNumber);
  ++lane.cursor_lap;
  if (lane.cursor_lap < kFairLapRebase) return;
  // Every place held is in the last `segments` laps: renumbered from 0 by
  // whole turns of the ring (a lap's segment stays lap % segments).
  const int64 by = (lane.cursor_lap - segments) / segments * segments;
  if (core::FairOrder* order = FairOf(lane))
    order->Rebase(static_cast<uint64>(by) << kFairLapShift);
  lane.cursor_lap -= by;
}

bool InPassed(const Lane& lane, int segment, ItemPointerData tid) {
  for (int i = 0; i < lane.passed_count; ++i) {
    ItemPointerData passed = lane.passed[i].tid;
    if (lane.passed[i].segment == segment && ItemPointerEquals(&passed, &tid)) {
      return true;
    }
  }
  return false;
}

// ---- lanes

// Rebuilds a lane from the ring's rows (both lane locks held), read in
// ring order — the segments after the current one (oldest first), then the
// current one: entries closed are done; with a receipt and no closure they
// run (the newest receipt's attempt and lease); the cursor starts after the
// last entry any receipt or closure names (else at the first entry), and
// the entries before it with neither are given back.
// INVARIANT: no segment after `place.current` in ring order holds an entry
// newer than the current one's. Entries are placed only through a built
// lane, in the ledger's current segment of the newest turn the lane knows,
// and a turn moves onto an empty segment: a segment after the current one
// is empty or older. (A backend whose ledger read is older than a turn made
// since the start builds from a current segment that is still empty.)
void Rebuild(Lane& lane, int index, const Place& place) {
  struct Job {
    int segment;
    ItemPointerData entry;
    bool has_entry = false;
    bool closed = false;
    bool running = false;
    // A prepared transaction's closure: a running job's lease is entered as
    // closing by it (gone at its COMMIT PREPARED, holding again at its
    // ROLLBACK PREPARED); a pending one's entry is taken as closed.
    TransactionId closing = InvalidTransactionId;
    int32 attempt = 0;
    int32 base = 0;
    TimestampTz lease_until = 0;
    TimestampTz claimed_at = 0;  // the attempt's first receipt
    TimestampTz newest_at = 0;   // its newest receipt (a claim's or an extension's)
    int32 claimed_by = 0;        // the attempt's first receipt's claimer
    bool grouped = false;        // its entry has a group key
    bool keyed = false;          // its entry has a dedupe key
    uint64 order = 0;
    uint64 key = 0;          // its entry's fair key (FairKeyOf)
    bool cancelled = false;  // its closure says 'x' (a cancel, not an end of a claim)
  };
  std::unordered_map<int64, Job> jobs;
  std::vector<int64> order;  // entries in ring order
  // Claimed entries ('a', AppendClaimed) by their claim's number: each
  // with its receipts and closure, which carry it (kEntry). They run
  // unless closed; they never move the cursor.
  struct ClaimedJob {
    int64 id = 0;
    int segment = 0;
    ItemPointerData entry;
    bool has_entry = false;
    bool closed = false;
    TransactionId closing = InvalidTransactionId;   // a prepared transaction's closure
    TransactionId claiming = InvalidTransactionId;  // a prepared transaction's claim
    int32 attempt = 0;
    TimestampTz lease_until = 0;
    TimestampTz claimed_at = 0;
    TimestampTz newest_at = 0;
    int32 claimed_by = 0;
    bool grouped = false;
    bool keyed = false;
    uint64 key = 0;  // its fair key
  };
  std::unordered_map<int64, ClaimedJob> claimed_entries;
  std::vector<Passed> in_progress;
  std::vector<uint64> in_progress_order;  // their places among the entries
  uint64 seen = 0;
  // What one page holds, copied out under its buffer lock (plain data: the
  // containers above are filled outside Guard, which they must not cross).
  struct Seen1 {
    bool in_progress;
    char kind;
    int64 id;
    int32 attempt;
    TimestampTz lease_until;
    TimestampTz at;
    int32 claimed_by;
    bool grouped;  // an entry with a group key
    bool keyed;    // an entry with a dedupe key
    TransactionId xmin;
    ItemPointerData tid;
    int64 claim_no;  // a claimed entry or a row of one: its claim's number
    uint64 key;      // an entry's fair key
    char outcome;    // a closure's
  };
  Seen1 rows[MaxHeapTuplesPerPage];
  const int segments = static_cast<int>(place.leaves.size());
  int first_with_entries = -1;
  // Each segment's lap as the cursor meets them (read in ring order): a
  // fair order's places (FairPlaceOf).
  std::vector<int64> lap_of(static_cast<size_t>(segments), 0);
  for (int k = 1; k <= segments; ++k) {
    const int segment = (place.current + k) % segments;
    const Oid relid = place.leaves[segment];
    Relation rel = Guard([&] { return table_open(relid, AccessShareLock); });
    TupleDesc desc = RelationGetDescr(rel);
    const BlockNumber blocks = Guard([&] { return RelationGetNumberOfBlocks(rel); });
    for (BlockNumber block = 0; block < blocks; ++block) {
      const int count = Guard([&] {
        int n = 0;
        Buffer buffer = ReadBuffer(rel, block);
        LockBuffer(buffer, BUFFER_LOCK_SHARE);
        Page page = BufferGetPage(buffer);
        const OffsetNumber max = PageGetMaxOffsetNumber(page);
        for (OffsetNumber offset = FirstOffsetNumber; offset <= max; ++offset) {
          HeapTupleData tuple;
          if (!RowAt(page, block, offset, relid, &tuple)) continue;
          const Seen seen_as = Look(tuple.t_data, buffer);
          if (seen_as == Seen::kGone) continue;
          bool is_null;
          const Datum lease = heap_getattr(&tuple, kLeaseUntil, desc, &is_null);
          const TimestampTz lease_until = is_null ? 0 : DatumGetTimestampTz(lease);
          const Datum at_datum = heap_getattr(&tuple, kAt, desc, &is_null);
          const TimestampTz at = is_null ? 0 : DatumGetTimestampTz(at_datum);
          // (A ring made by a development catalog of 3.0 has no claimer.)
          const Datum claimer = desc->natts >= kClaimedBy
                                    ? heap_getattr(&tuple, kClaimedBy, desc, &is_null)
                                    : (is_null = true, Datum{0});
          const int32 claimed_by = is_null ? 0 : DatumGetInt32(claimer);
          rows[n++] = Seen1{seen_as == Seen::kInProgress,
                            KindOf(&tuple, desc),
                            IdOf(&tuple, desc),
                            AttemptOf(&tuple, desc),
                            lease_until,
                            at,
                            claimed_by,
                            GroupedOf(&tuple, desc),
                            KeyedOf(&tuple, desc),
                            HeapTupleHeaderGetRawXmin(tuple.t_data),
                            tuple.t_self,
                            ClaimNoOf(&tuple, desc),
                            KindOf(&tuple, desc) == 'e' || KindOf(&tuple, desc) == 'a'
                                ? FairKeyOf(&tuple, desc)
                                : 0,
                            '\0'};
          if (rows[n - 1].kind == 'c') {
            const Datum outcome = heap_getattr(&tuple, kOutcome, desc, &is_null);
            rows[n - 1].outcome = is_null ? '\0' : DatumGetChar(outcome);
          }
        }
        UnlockReleaseBuffer(buffer);
        return n;
      });
      for (int r = 0; r < count; ++r) {
        const Seen1& row = rows[r];
        // Rows of a transaction in progress: a prepared one's, or an
        // enqueue's whose lane was taken back after its append (no other
        // in-progress writer leaves a lane idle: a claim's and a closure's
        // leases, a tombstone's note). Its entries before the cursor wait in
        // the passed set; those after it, for the cursor, which passes them
        // as it does any entry in progress. Its receipts hold their jobs as
        // running.
        if (row.kind == 'e' && first_with_entries < 0) first_with_entries = segment;
        if (row.claim_no != 0) {
          // A claimed entry, or a row of one (a receipt's lease, a
          // closure; a prepared transaction's claim or closure holds the
          // lease as its claimer or closer).
          ClaimedJob& job = claimed_entries[row.claim_no];
          if (row.kind == 'a') {
            job.id = row.id;
            job.segment = segment;
            job.entry = row.tid;
            job.has_entry = true;
            job.attempt = row.attempt;
            job.claimed_at = row.at;
            job.claimed_by = row.claimed_by;
            job.grouped = row.grouped;
            job.keyed = row.keyed;
            job.key = row.key;
            if (row.in_progress) job.claiming = row.xmin;
          } else if (row.kind == 'c') {
            job.closed = true;
            if (row.in_progress) job.closing = row.xmin;
          }
          if ((row.kind == 'a' || row.kind == 'r') && row.at >= job.newest_at) {
            job.newest_at = row.at;
            job.lease_until = row.lease_until;
          }
          continue;
        }
        if (row.in_progress && row.kind == 'e') {
          in_progress.push_back(Passed{row.xmin, row.tid, static_cast<int16>(segment)});
          in_progress_order.push_back(++seen);
          continue;
        }
        Job& job = jobs[row.id];
        if (row.kind == 'e') {
          job.segment = segment;
          job.entry = row.tid;
          job.has_entry = true;
          job.base = row.attempt;
          job.grouped = row.grouped;
          job.keyed = row.keyed;
          job.order = ++seen;
          job.key = row.key;
          order.push_back(row.id);
        } else if (row.kind == 'r') {
          // The newest receipt of the newest attempt gives the lease (an
          // extension's receipt may lie on an earlier page than the
          // claim's: receipts take any page with room); its first, the
          // claim's time.
          job.running = true;
          if (row.attempt > job.attempt) {
            job.attempt = row.attempt;
            job.claimed_at = job.newest_at = row.at;
            job.lease_until = row.lease_until;
            job.claimed_by = row.claimed_by;
          } else if (row.attempt == job.attempt) {
            if (row.at < job.claimed_at) {
              job.claimed_at = row.at;
              job.claimed_by = row.claimed_by;
            }
            if (row.at >= job.newest_at) {
              job.newest_at = row.at;
              job.lease_until = row.lease_until;
            }
          }
        } else if (row.kind == 'c') {
          job.closed = true;
          job.cancelled = row.outcome == 'x';
          if (row.in_progress) job.closing = row.xmin;
        }
      }
    }
    Guard([&] { table_close(rel, AccessShareLock); });
    lap_of[segment] = place.current + k;
  }
  // Leases of an earlier ring of this queue (the extension dropped and
  // created again) go.
  {
    std::vector<LeaseKey> stale;
    stale.reserve(static_cast<size_t>(shared->lease_capacity));  // nothing thrown under the locks
    Guard([] {
      for (int i = 0; i < kLeasePartitions; ++i) LWLockAcquire(&lease_locks[i].lock, LW_SHARED);
    });
    HASH_SEQ_STATUS scan;
    hash_seq_init(&scan, leases);
    while (LeaseSlot* slot = static_cast<LeaseSlot*>(hash_seq_search(&scan))) {
      if (slot->key.database == static_cast<int64>(MyDatabaseId) &&
          slot->lease.ring_id == place.ring_id &&
          std::find(place.leaves.begin(), place.leaves.end(), slot->lease.entry_relid) ==
              place.leaves.end()) {
        stale.push_back(slot->key);
      }
    }
    for (int i = 0; i < kLeasePartitions; ++i) LWLockRelease(&lease_locks[i].lock);
    for (const LeaseKey& key : stale) Guard([&] { DropLease(key); });
  }
  uint64 last_named = 0;
  for (const auto& [id, job] : jobs) {
    if (job.has_entry && (job.running || job.closed)) last_named = std::max(last_named, job.order);
  }
  lane.passed_count = 0;
  for (size_t i = 0; i < in_progress.size(); ++i) {
    if (in_progress_order[i] < last_named && lane.passed_count < kPassedMax) {
      lane.passed[lane.passed_count++] = in_progress[i];
    }
  }
  lane.returned_count = 0;
  lane.cancelled_count = 0;  // a cancel's closure is a row: its entry is closed above
  lane.cursor_segment = first_with_entries >= 0 ? first_with_entries : place.current;
  ItemPointerSet(&lane.cursor, 0, FirstOffsetNumber);
  // Pending entries behind the cursor. A queue handing out in ring order
  // has few (claims rolled back, late commits): given back. A fair one
  // (ADR 0029) handed its keys' entries out of ring order: each key's
  // pending entries after its last claimed one are filed again in a fair
  // order (its own claims go in its order: those before are the few
  // exceptions, given back).
  DetachFair(lane);
  size_t behind = 0;
  for (const int64 id : order) {
    const Job& job = jobs[id];
    behind += !job.closed && !job.running && job.order <= last_named;
  }
  core::FairOrder* fair = nullptr;
  std::unordered_map<uint64, uint64> last_claimed;  // a fair key's last entry claimed
  if ((place.fair || behind > static_cast<size_t>(kReturnedMax)) && AttachFair(lane, index)) {
    fair = FairOf(lane);
    lane.fair_weights_stamp = place.weights_stamp;
    for (const auto& [id, job] : jobs) {
      if (job.has_entry && (job.running || (job.closed && !job.cancelled))) {
        uint64& last = last_claimed[job.key];
        last = std::max(last, job.order);
      }
    }
  }
  lane.cursor_lap = lap_of[lane.cursor_segment];
  for (const int64 id : order) {
    const Job& job = jobs[id];
    if (fair != nullptr && job.cancelled && !job.running && job.order <= last_named &&
        fair->Skipping(job.key)) {
      // Cancelled while pending, past its key's mark: a sweep passes it over.
      if (lane.cancelled_count == kCancelledMax) {
        Raise(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
              "queue " + std::to_string(place.queue_id) + " has too many cancelled jobs to note");
      }
      lane.cancelled[lane.cancelled_count++] =
          Tomb{job.entry, static_cast<int16>(job.segment),
               TransactionIdIsValid(job.closing) ? job.closing : FrozenTransactionId};
      ++lane.fair_skipped;
      continue;
    }
    if (job.closed && !(job.running && TransactionIdIsValid(job.closing))) continue;
    if (job.running) {
      // A committed claim: no claiming transaction to wait for.
      Lease lease{MyDatabaseId,    place.queue_id,
                  place.ring_id,   job.attempt,
                  job.lease_until, place.leaves[job.segment],
                  job.entry,       InvalidTransactionId,
                  index,           job.claimed_at,
                  job.closing,     job.claimed_by,
                  job.grouped,     job.keyed};
      lease.fair_key = job.key;
      Guard([&] { (void)PutLease(LeaseKey{MyDatabaseId, id}, lease); });
      continue;
    }
    if (job.order <= last_named && fair != nullptr && job.order > last_claimed[job.key]) {
      const core::FairFiled filed = fair->File(job.key, WeightOf(place, job.key),
                                               FairPlaceOf(lap_of[job.segment], job.entry), id);
      if (filed == core::FairFiled::kSkipped) ++lane.fair_skipped;
      if (filed != core::FairFiled::kNoSlot) continue;
    }
    if (job.order <= last_named) {
      if (lane.returned_count == kReturnedMax) {
        Raise(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
              "queue " + std::to_string(place.queue_id) + " has too many jobs to give back",
              "More than " + std::to_string(kReturnedMax) +
                  " of its pending jobs lie before jobs it handed out (a fair queue's "
                  "keys, ADR 0029), and no fair order is free to file them.",
              "Raise pgq.max_fair_queues_per_database or pgq.max_fair_queues (a restart); its "
              "jobs are handed out again once a fair order is free.");
      }
      lane.returned[lane.returned_count++] =
          Offer{job.entry, job.base + 1, static_cast<int16>(job.segment)};
    }
  }
  // Claimed entries not closed run (one closing by a prepared transaction
  // holds its lease as closing).
  for (const auto& [key, job] : claimed_entries) {
    if (!job.has_entry || (job.closed && !TransactionIdIsValid(job.closing))) continue;
    Lease lease{MyDatabaseId,   place.queue_id,  place.ring_id,
                job.attempt,    job.lease_until, place.leaves[job.segment],
                job.entry,      job.claiming,    index,
                job.claimed_at, job.closing,     job.claimed_by,
                job.grouped,    job.keyed,       key};
    // A claim in progress after a start is a prepared transaction's.
    lease.prepared = TransactionIdIsValid(job.claiming);
    lease.fair_key = job.key;
    Guard([&] { (void)PutLease(LeaseKey{MyDatabaseId, job.id}, lease); });
  }
  // The cursor: just after the last entry named by a receipt or closure.
  for (const int64 id : order) {
    const Job& job = jobs[id];
    if (job.order == last_named) {
      lane.cursor_segment = job.segment;
      ItemPointerSet(&lane.cursor, ItemPointerGetBlockNumber(&job.entry),
                     ItemPointerGetOffsetNumber(&job.entry) + 1);
    }
  }
  lane.cursor_lap = lap_of[lane.cursor_segment];
  lane.insert_segment = place.current;
  lane.insert_generation = place.generation;
  lane.insert_block = InvalidBlockNumber;
  lane.identity = place.leaves.empty() ? InvalidOid : place.leaves[0];
  lane.built = true;
}

// Entries go to the current segment of `place`'s turn if it is newer than
// the lane's (the insert lock held).
void FollowTurn(Lane& lane, const Place& place) {
  if (place.generation <= lane.insert_generation) return;
  lane.insert_segment = place.current;
  lane.insert_generation = place.generation;
  lane.insert_block = InvalidBlockNumber;
}

// Whether lane `index` can be taken back and built again from its ring's
// rows at its queue's next use (lanes_lock held exclusively): no call or
// transaction holds it (pinned: a claim in progress, a tombstone's note),
// no lease of it is in the map (held or closing), no claim is in flight.
// What else it holds the rebuild finds again: entries given back (a claim
// rolled back: an entry without a receipt, behind the cursor), passed (an
// enqueue in progress when the cursor passed it: in progress still, or
// committed without a receipt, or gone) and noted cancelled (a committed
// closure). kClean: it holds none of them either (nothing to read again).
enum class Idleness { kBusy, kIdle, kClean };
Idleness IdlenessOf(int index) {
  Lane& lane = shared->lanes[index];
  if (pg_atomic_read_u32(&lane.leases) != 0 || pg_atomic_read_u32(&lane.closing) != 0 ||
      pg_atomic_read_u32(&lane.reserved) != 0 || Pinned(index)) {
    return Idleness::kBusy;
  }
  if (!LWLockConditionalAcquire(lane.claim_lock, LW_SHARED)) return Idleness::kBusy;
  Idleness idleness = Idleness::kIdle;
  const core::FairOrder* fair = FairOf(lane);
  if (fair != nullptr && (fair->FiledCount() > 0 || fair->SkippingKeys() > 0)) {
    // Its keys' entries: a rebuild would need a fair order again, which
    // another queue may have taken meanwhile.
    idleness = Idleness::kBusy;
  } else if (lane.passed_count == 0 && lane.returned_count == 0 && lane.cancelled_count == 0) {
    idleness = Idleness::kClean;
  } else if (lane.returned_count + lane.passed_count > kReturnedMax) {
    idleness = Idleness::kBusy;  // more than the rebuild could give back
  }
  LWLockRelease(lane.claim_lock);
  return idleness;
}

// Whether (database, ring_id) is noted as having dependents (lanes_lock
// held exclusively); `take`: its note goes (the lane taken carries it).
bool NotedDependents(Oid database, int32 ring_id, bool take) {
  bool noted = shared->noted_overflow;
  for (int i = 0; i < shared->noted_count; ++i) {
    const Shared::Noted& n = shared->noted[i];
    if (n.database != database || (n.ring_id != ring_id && n.ring_id != -1)) continue;
    noted = true;
    if (take && n.ring_id == ring_id) {
      shared->noted[i--] = shared->noted[--shared->noted_count];
    }
  }
  return noted;
}

void NoteLater(Oid database, int32 ring_id) {
  if (NotedDependents(database, ring_id, false)) return;
  if (shared->noted_count == kNotedMax) {
    // Full: this database's notes become one for all its rings, so that
    // one database's workflows make only its own ring queues' ends look
    // for children; every database's only when the others fill the list.
    int others = 0;
    for (int i = 0; i < shared->noted_count; ++i) {
      if (shared->noted[i].database != database) shared->noted[others++] = shared->noted[i];
    }
    shared->noted_count = others;
    if (others == kNotedMax) {
      shared->noted_overflow = true;
      return;
    }
    ring_id = -1;
  }
  shared->noted[shared->noted_count++] = Shared::Noted{database, ring_id};
}

// Takes back the least recently used idle lane (IdlenessOf) of `database`
// (InvalidOid: of any database) and frees it; its index, or -1. lanes_lock
// held exclusively. The ring's rows hold all it held: its queue's next use
// builds a lane again, as after a start; a note that its jobs may have
// dependents is kept for that lane (Shared::noted).
int TakeBack(Oid database) {
  // A clean lane first (nothing to read again), then the least recently
  // used.
  int best = -1;
  bool best_clean = false;
  uint64 best_used = PG_UINT64_MAX;
  for (int i = 0; i < shared->lane_count; ++i) {
    Lane& lane = shared->lanes[i];
    if (lane.database == InvalidOid || (database != InvalidOid && lane.database != database)) {
      continue;
    }
    const uint64 used = pg_atomic_read_u64(&lane.used);
    if (best_clean && used >= best_used) continue;
    const Idleness idleness = IdlenessOf(i);
    if (idleness == Idleness::kBusy) continue;
    const bool clean = idleness == Idleness::kClean;
    if ((clean && !best_clean) || (clean == best_clean && used < best_used)) {
      best = i;
      best_clean = clean;
      best_used = used;
    }
  }
  if (best < 0) return -1;
  Lane& lane = shared->lanes[best];
  if (pg_atomic_read_u32(&lane.dependents) != 0) NoteLater(lane.database, lane.ring_id);
  lane.database = InvalidOid;
  lane.built = false;
  DetachFair(lane);  // its rebuild files its keys' entries again
  pg_atomic_write_u32(&lane.dependents, 0);
  return best;
}

// The lane of the queue, built if this is its first use since the start
// (or since its lane was taken back), and pinned: the caller lets go at
// its end (CallPin), or keeps it to the transaction's end (Keep). When no
// lane is free and none idle: raises 53400, or returns -1 if `or_none`.
// True once a minute at most for `logged_at` (a shared timestamp): the
// caller logs.
bool TimeToLog(pg_atomic_uint64* logged_at) {
  const uint64 at = static_cast<uint64>(GetCurrentTimestamp());
  uint64 last = pg_atomic_read_u64(logged_at);
  return at - last >= kSizingLogEveryUs && pg_atomic_compare_exchange_u64(logged_at, &last, at);
}

int LaneOf(const Place& place, bool or_none = false, bool take_back = true) {
  if (shared == nullptr) {
    Raise(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
          "queue " + std::to_string(place.queue_id) +
              " keeps its jobs on a ring, which needs pgq_cpp preloaded",
          {}, "Add pgq_cpp to shared_preload_libraries and restart the server.");
  }
  if (MyProc == nullptr || MyProc->pgprocno >= shared->pin_slots) {
    Raise(ERRCODE_INTERNAL_ERROR, "this process cannot use the rings of queues");
  }
  WatchXactEnds();  // the pin goes at the transaction's end
  const uint64 now = static_cast<uint64>(GetCurrentTransactionStartTimestamp());
  int found = -1;
  Guard([&] {
    LWLockAcquire(shared->lanes_lock, LW_SHARED);
    for (int i = 0; i < shared->lane_count && found < 0; ++i) {
      const Lane& lane = shared->lanes[i];
      if (lane.database == MyDatabaseId && lane.ring_id == place.ring_id) found = i;
    }
    if (found >= 0) Pin(found);
    LWLockRelease(shared->lanes_lock);
  });
  // A lane taken: none free, or this database's share used up, and none of
  // its idle lanes (or, with none free, any database's) to take back.
  for (int tries = 0; found < 0; ++tries) {
    int ours = 0;
    std::vector<Oid> others;  // other databases' lanes, when none is free
    others.reserve(static_cast<size_t>(shared->lane_count));
    Guard([&] {
      LWLockAcquire(shared->lanes_lock, LW_EXCLUSIVE);
      int free_lane = -1;
      for (int i = 0; i < shared->lane_count && found < 0; ++i) {
        Lane& lane = shared->lanes[i];
        if (lane.database == MyDatabaseId && lane.ring_id == place.ring_id) found = i;
        if (lane.database == InvalidOid && free_lane < 0) free_lane = i;
        if (lane.database == MyDatabaseId) ++ours;
        if (lane.database != InvalidOid && lane.database != MyDatabaseId) {
          others.push_back(lane.database);
        }
      }
      const bool share_used = ours >= MaxRingQueuesPerDatabase();
      if (found < 0 && take_back && (share_used || free_lane < 0)) {
        const int taken = TakeBack(share_used ? MyDatabaseId : InvalidOid);
        if (taken >= 0) {
          if (share_used) --ours;
          free_lane = taken;
        }
      }
      if (found < 0 && free_lane >= 0 && ours < MaxRingQueuesPerDatabase()) {
        Lane& lane = shared->lanes[free_lane];
        lane.database = MyDatabaseId;
        lane.ring_id = place.ring_id;
        lane.built = false;
        pg_atomic_write_u32(&lane.dependents,
                            NotedDependents(MyDatabaseId, place.ring_id, true) ? 1 : 0);
        found = free_lane;
      }
      if (found >= 0) Pin(found);
      LWLockRelease(shared->lanes_lock);
    });
    if (found >= 0) break;
    if (ours >= MaxRingQueuesPerDatabase()) {
      if (or_none) return -1;
      Raise(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED, "database has too many queues in use at once",
            "Its queues hold " + std::to_string(ours) +
                " of the server's lanes, pgq.max_ring_queues_per_database, each with running "
                "jobs or in use by a transaction.",
            "Raise pgq.max_ring_queues_per_database for this database (ALTER DATABASE ... SET); "
            "a lane is free again once its queue has no running job.");
    }
    // None free or idle: the lanes of databases dropped since are taken
    // back, once.
    bool freed = false;
    if (tries == 0) {
      std::sort(others.begin(), others.end());
      others.erase(std::unique(others.begin(), others.end()), others.end());
      for (const Oid database : others) {
        if (!Guard(
                [&] { return SearchSysCacheExists1(DATABASEOID, ObjectIdGetDatum(database)); })) {
          ForgetDatabase(database);
          freed = true;
        }
      }
    }
    if (freed && take_back) continue;
    if (or_none) return -1;
    Raise(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED, "too many queues in use at once in the server",
          "Every one of the server's " + std::to_string(shared->lane_count) +
              " lanes (pgq.max_ring_queues) has running jobs or is in use by a transaction.",
          "Raise pgq.max_ring_queues (a restart); a lane is free again once its queue has no "
          "running job.");
  }
  Lane& lane = shared->lanes[found];
  if (pg_atomic_read_u64(&lane.used) < now) pg_atomic_write_u64(&lane.used, now);
  const Oid identity = place.leaves.empty() ? InvalidOid : place.leaves[0];
  if (lane.built && lane.identity == identity) return found;
  Guard([&] {
    LWLockAcquire(lane.insert_lock, LW_EXCLUSIVE);
    LWLockAcquire(lane.claim_lock, LW_EXCLUSIVE);
  });
  if (!lane.built || lane.identity != identity) {
    try {
      Rebuild(lane, found, place);  // its own calls into PostgreSQL are guarded
    } catch (...) {
      LWLockRelease(lane.claim_lock);
      LWLockRelease(lane.insert_lock);
      throw;
    }
  }
  LWLockRelease(lane.claim_lock);
  LWLockRelease(lane.insert_lock);
  return found;
}

TupleDesc DescOf(Relation rel) { return RelationGetDescr(rel); }

}  // namespace

void RequestShmem() {
  prev_request = shmem_request_hook;
  shmem_request_hook = Request;
  prev_startup = shmem_startup_hook;
  shmem_startup_hook = Startup;
}

bool Available() { return shared != nullptr; }

uint64 FairKey(std::string_view group_key) {
  return FairKeyOfBytes(group_key.data(), group_key.size());
}

namespace {

// The operator's sign that the lanes are too few (nothing is refused: the
// jobs wait, or run, in pgq.job_rows).
void LogNoLane(const Place& place) {
  if (!TimeToLog(&shared->no_lane_logged_at)) return;
  Guard([&] {
    ereport(LOG, (errmsg("pgq: queue %d found no lane free: its new jobs wait in "
                         "pgq.job_rows until its queues in use leave it one",
                         place.queue_id),
                  errdetail("Queues finding no lane in the next minute are not logged."),
                  errhint("Raise pgq.max_ring_queues_per_database (ALTER DATABASE ... SET) or "
                          "pgq.max_ring_queues (a restart).")));
  });
}

// The columns of an entry ('e' or 'a') that its job's NewEntry gives.
void SetEntry(Row& row, const NewEntry& entry, TupleDesc desc) {
  row.Set(kPriority, Int32GetDatum(entry.priority));
  row.Set(kMaxAttempts, Int32GetDatum(entry.max_attempts));
  row.Set(kRunAt, TimestampTzGetDatum(entry.run_at));
  row.Set(kEnqueuedAt, TimestampTzGetDatum(entry.enqueued_at));
  row.Set(kPayload, entry.payload);
  if (entry.group_key != 0 && desc->natts >= kGroupKey) row.Set(kGroupKey, entry.group_key);
  if (entry.dedupe_key != 0 && desc->natts >= kDedupeFor) {
    row.Set(kDedupeKey, entry.dedupe_key);
    if (entry.dedupe_for != 0) row.Set(kDedupeFor, entry.dedupe_for);
  }
  if (entry.last_error != 0 && desc->natts >= kLastError) row.Set(kLastError, entry.last_error);
  if (entry.trace_context != 0 && desc->natts >= kTraceContext) {
    row.Set(kTraceContext, entry.trace_context);
  }
}

// Inserts `count` rows, row i formed by form(i, segment, desc), at the
// lane's insert place: the current segment of the newest turn known, this
// backend's or the lane's (read again under the insert lock; the rows go
// to the lane's segment if a turn or a truncation moved it on meanwhile).
// The rows are formed before the lock, which covers their placing (a
// payload past the TOAST threshold is still toasted under it). Their
// segment; `tuples` holds them, placed. In Guard.
template <typename Form>
int InsertAtLane(const Place& place, Lane& lane, int count, Form&& form, HeapTuple* tuples) {
  int segment = place.generation >= lane.insert_generation ? place.current : lane.insert_segment;
  for (;;) {
    Relation rel = table_open(place.leaves[segment], RowExclusiveLock);
    TupleDesc desc = DescOf(rel);
    for (int i = 0; i < count; ++i) tuples[i] = form(i, segment, desc);
    LWLockAcquire(lane.insert_lock, LW_EXCLUSIVE);
    // A turn this backend has read and the lane not yet: entries go to
    // its segment from now on.
    FollowTurn(lane, place);
    if (lane.insert_segment != segment) {
      segment = lane.insert_segment;
      LWLockRelease(lane.insert_lock);
      table_close(rel, NoLock);
      continue;
    }
    RelationSetTargetBlock(rel, lane.insert_block);
    InsertRows(rel, tuples, count, HEAP_INSERT_SKIP_FSM);
    lane.insert_block = ItemPointerGetBlockNumber(&tuples[count - 1]->t_self);
    LWLockRelease(lane.insert_lock);
    table_close(rel, NoLock);
    return segment;
  }
}

}  // namespace

bool Append(const Place& place, const NewEntry* entries, int count) {
  if (count == 0) return true;
  const CallPin pin{LaneOf(place, true)};
  if (pin.index < 0) {
    LogNoLane(place);
    return false;
  }
  Guard([&] {
    HeapTuple* tuples = static_cast<HeapTuple*>(palloc(sizeof(HeapTuple) * count));
    (void)InsertAtLane(
        place, shared->lanes[pin.index], count,
        [&](int i, int segment, TupleDesc desc) {
          Row row(place, segment, 'e', entries[i].id, 0);
          SetEntry(row, entries[i], desc);
          return heap_form_tuple(desc, row.values, row.nulls);
        },
        tuples);
  });
  return true;
}

bool AppendClaimed(const Place& place, const NewEntry* entries, const int32* attempts, int count,
                   TimestampTz now, TimestampTz lease_until, bool* leased) {
  if (count == 0) return true;
  const CallPin pin{LaneOf(place, true)};
  const int index = pin.index;
  if (index < 0) {
    LogNoLane(place);
    return false;
  }
  ReserveUndo(static_cast<size_t>(count));
  const SubTransactionId sub = GetCurrentSubTransactionId();
  Guard([&] {
    const TransactionId xid = GetCurrentTransactionId();  // the rows are written below
    HeapTuple* tuples = static_cast<HeapTuple*>(palloc(sizeof(HeapTuple) * count));
    // In claim order, as one claim's: an entry and its receipt in one row.
    const int segment = InsertAtLane(
        place, shared->lanes[index], count,
        [&](int i, int at_segment, TupleDesc desc) {
          Row row(place, at_segment, 'a', entries[i].id, attempts[i]);
          SetEntry(row, entries[i], desc);
          row.Set(kEntry, Int64GetDatum(entries[i].claim_no));
          row.Set(kLeaseUntil, TimestampTzGetDatum(lease_until));
          row.Set(kAt, TimestampTzGetDatum(now));
          row.Set(kClaimedBy, Int32GetDatum(MyProcPid));
          return heap_form_tuple(desc, row.values, row.nulls);
        },
        tuples);
    bool any = false, all = true;
    for (int i = 0; i < count; ++i) {
      Lease lease{MyDatabaseId,
                  place.queue_id,
                  place.ring_id,
                  attempts[i],
                  lease_until,
                  place.leaves[segment],
                  tuples[i]->t_self,
                  xid,
                  index,
                  now,
                  InvalidTransactionId,
                  MyProcPid,
                  entries[i].group_key != 0,
                  entries[i].dedupe_key != 0,
                  entries[i].claim_no};
      if (entries[i].group_key != 0 && place.fair) {
        text* group_key = DatumGetTextPP(entries[i].group_key);
        lease.fair_key = FairKeyOfBytes(VARDATA_ANY(group_key), VARSIZE_ANY_EXHDR(group_key));
      }
      const LeaseKey key{MyDatabaseId, entries[i].id};
      leased[i] = PutLease(key, lease);
      if (leased[i]) undo->push_back(Undo{sub, UndoKind::kDropLease, key, lease, index, {}});
      any = any || leased[i];
      all = all && leased[i];
    }
    if (any) Keep(index);
    if (all) return;
    // No room in the lease map for some: their rows closed at once ('m':
    // the caller keeps them running rows of pgq.job_rows).
    Relation rel = table_open(place.leaves[segment], RowExclusiveLock);
    TupleDesc desc = DescOf(rel);
    HeapTuple* closures = static_cast<HeapTuple*>(palloc(sizeof(HeapTuple) * count));
    int closed = 0;
    for (int i = 0; i < count; ++i) {
      if (leased[i]) continue;
      Row row(place, segment, 'c', entries[i].id, attempts[i]);
      row.Set(kAt, TimestampTzGetDatum(now));
      row.Set(kOutcome, CharGetDatum('m'));
      row.Set(kEntry, Int64GetDatum(entries[i].claim_no));
      closures[closed++] = heap_form_tuple(desc, row.values, row.nulls);
    }
    InsertRows(rel, closures, closed, 0);
    table_close(rel, NoLock);
  });
  return true;
}

namespace {

// How many of `n` more ring jobs of this database may run with a lease:
// what is left of the map and of the database's share of it
// (pgq.max_running_ring_jobs_per_database, less what its lanes hold); 0
// when nothing is. Read without a lock: claims of the database running at
// once may pass its share by their batches; the map's capacity is exact
// (PutLease). Claims past it are not refused: their jobs run as rows of
// pgq.job_rows (Claim), so that no queue's running jobs can make another
// team's claims fail.
int32 LeaseRoom(int32 n) {
  const int64 all = pg_atomic_read_u32(&shared->leases);
  if (all >= shared->lease_capacity) return 0;
  n = static_cast<int32>(std::min<int64>(n, shared->lease_capacity - all));
  const int64 share = MaxRunningRingJobsPerDatabase();
  if (all + n <= share) return n;  // no database can pass its share
  int64 ours = 0;
  for (int i = 0; i < shared->lane_count; ++i) {
    if (shared->lanes[i].database == MyDatabaseId)
      ours += pg_atomic_read_u32(&shared->lanes[i].leases);
  }
  return static_cast<int32>(std::clamp<int64>(share - ours, 0, n));
}

}  // namespace

namespace {

// Whether an entry comes before `bound` in claim order (all ring entries
// have priority 0: by run_at, then id).
bool Precedes(HeapTupleData* tuple, TupleDesc desc, const Bound* bound) {
  if (bound == nullptr) return true;
  bool is_null;
  const TimestampTz run_at = DatumGetTimestampTz(heap_getattr(tuple, kRunAt, desc, &is_null));
  if (run_at != bound->run_at) return run_at < bound->run_at;
  return IdOf(tuple, desc) < bound->id;
}

// What the cursor does with a committed entry it meets (WalkCursor).
enum class Step {
  kNext,  // on to the next row
  kStop,  // the cursor moves past it and stops
  kStay,  // the cursor stays at it and stops
};

// Walks the claim cursor (the claim lock held) through its segment, and on
// into the next once entries have left it for good, offering visit(tuple,
// desc, segment) each committed entry; an entry in progress goes to the
// passed set (the cursor waits at it while the set is full). Stops at the
// last entry placed, or as visit says. False when the cursor is in a
// segment not open (`need`, if given, says so: the caller opens it and
// comes back).
template <typename Visit>
bool WalkCursor(Lane& lane, const std::vector<Relation>& rels, std::vector<char>* need,
                int segments, Visit&& visit) {
  for (;;) {
    const int segment = lane.cursor_segment;
    Relation rel = rels[segment];
    if (rel == nullptr) {
      if (need != nullptr) (*need)[segment] = 1;
      return false;
    }
    // Whether entries have left this segment: read before its length,
    // which is then final (the turn was made under the insert lock,
    // after the last entry placed here).
    const bool left = lane.insert_segment != segment;
    pg_read_barrier();
    BlockNumber last = left ? InvalidBlockNumber : lane.insert_block;
    if (last == InvalidBlockNumber) {
      const BlockNumber blocks = RelationGetNumberOfBlocks(rel);
      last = blocks == 0 ? InvalidBlockNumber : blocks - 1;
    }
    TupleDesc desc = RelationGetDescr(rel);
    bool at_end = last == InvalidBlockNumber || ItemPointerGetBlockNumber(&lane.cursor) > last;
    bool stop = false;
    while (!at_end && !stop) {
      const BlockNumber block = ItemPointerGetBlockNumber(&lane.cursor);
      Buffer buffer = ReadBuffer(rel, block);
      LockBuffer(buffer, BUFFER_LOCK_SHARE);
      Page page = BufferGetPage(buffer);
      const OffsetNumber max = PageGetMaxOffsetNumber(page);
      OffsetNumber offset = ItemPointerGetOffsetNumber(&lane.cursor);
      bool stalled = false;
      for (; offset <= max && !stop && !stalled; ++offset) {
        HeapTupleData tuple;
        if (!RowAt(page, block, offset, RelationGetRelid(rel), &tuple)) continue;
        switch (Look(tuple.t_data, buffer)) {
          case Seen::kCommitted:
            if (KindOf(&tuple, desc) != 'e') break;
            switch (visit(&tuple, desc, segment)) {
              case Step::kNext:
                break;
              case Step::kStop:
                stop = true;
                break;
              case Step::kStay:
                stalled = stop = true;  // the cursor stays at it
                --offset;
                break;
            }
            break;
          case Seen::kInProgress:
            if (KindOf(&tuple, desc) != 'e') break;
            if (lane.passed_count == kPassedMax) {
              stalled = stop = true;  // the cursor waits here until the set has room
              --offset;
              break;
            }
            lane.passed[lane.passed_count++] = Passed{HeapTupleHeaderGetRawXmin(tuple.t_data),
                                                      tuple.t_self, static_cast<int16>(segment)};
            break;
          case Seen::kGone:
            break;
        }
      }
      UnlockReleaseBuffer(buffer);
      if (stalled || offset <= max || block == last) {
        ItemPointerSet(&lane.cursor, block, offset);
        at_end = !stalled && offset > max && block == last;
        break;
      }
      ItemPointerSet(&lane.cursor, block + 1, FirstOffsetNumber);
    }
    if (!at_end || !left) return true;
    // Every entry of the segment seen: on to the next one.
    NextCursorSegment(lane, segments);
  }
}

// A fair lane's work under its claim lock (ADR 0029, core/fair_order.h):
// the passed set's committed entries and the cursor's file into the fair
// order, sweeps refill its skipping keys, claims take in its order. Every
// segment of the ring is open (`rels`).
class FairLane {
 public:
  FairLane(Lane& lane, core::FairOrder& order, const std::vector<Relation>& rels,
           const Place& place)
      : lane_(lane),
        order_(order),
        rels_(rels),
        place_(place),
        segments_(static_cast<int>(rels.size())) {}

  // What a claim does before it takes: the passed set, the cursor, and a
  // sweep if one is due (then both again: a sweep that ends a key's
  // skipping may free the slot one of them waits for).
  void Prepare() {
    if (lane_.fair_weights_stamp != place_.weights_stamp) {
      // The queue's weights changed: every key's from its next turn.
      order_.Reweigh([](void* place,
                        uint64_t key) { return WeightOf(*static_cast<const Place*>(place), key); },
                     const_cast<Place*>(&place_));
      lane_.fair_weights_stamp = place_.weights_stamp;
    }
    FilePassed();
    FileCursor();
    if (order_.SweepWanted()) {
      Sweep();
      FilePassed();
      FileCursor();
    }
  }

  // The next turn in fair order: an entry (its segment and place) or a
  // due row of pgq.job_rows (its id), taken (`take`) or only looked at;
  // nullopt when none is left. Nothing found while keys skip: one sweep,
  // the cursor, and a look again.
  struct Turn {
    int segment;
    ItemPointerData tid;
    int64 row;     // a row's id; 0: an entry
    bool grouped;  // (a row) filed under a group key, not the key of none
  };
  std::optional<Turn> Next(bool take) {
    std::optional<core::FairOrder::Taken> next = take ? order_.Take() : order_.Next();
    if (!next && !swept_ && order_.SkippingKeys() > 0) {
      swept_ = true;
      Sweep();
      FilePassed();
      FileCursor();
      next = take ? order_.Take() : order_.Next();
    }
    if (!next) return std::nullopt;
    ItemPointerData tid;
    if (next->row) {
      ItemPointerSetInvalid(&tid);
      return Turn{-1, tid, static_cast<int64>(next->place), next->key != 0};
    }
    const FairAt at = FairAtOf(next->place);
    ItemPointerSet(&tid, at.block, at.offset);
    return Turn{static_cast<int>(at.lap % segments_), tid, 0, next->key != 0};
  }

 private:
  Offer EntryAt(int segment, ItemPointerData tid) const {
    return Offer{tid, 0, static_cast<int16>(segment)};
  }

  // Committed entries the cursor passed in progress: filed past their
  // key's room (FileLate), or left to a sweep; kept while no slot is free.
  void FilePassed() {
    for (int i = 0; i < lane_.passed_count;) {
      const Passed passed = lane_.passed[i];
      if (TransactionIdIsInProgress(passed.xid)) {
        ++i;
        continue;
      }
      if (TransactionIdDidCommit(passed.xid)) {
        uint64 key = 0;
        int64 id = 0;
        VisitRow(rels_[passed.segment], passed.tid, [&](HeapTupleData* tuple, Buffer) {
          key = FairKeyOf(tuple, RelationGetDescr(rels_[passed.segment]));
          id = IdOf(tuple, RelationGetDescr(rels_[passed.segment]));
        });
        const core::FairPlace at =
            FairPlaceOf(LapBehind(lane_, passed.segment, segments_), passed.tid);
        const Offer entry = EntryAt(passed.segment, passed.tid);
        if (lane_.cancelled_count > 0 && Cancelled(lane_, entry, false)) {
          // Its note stays while a sweep has still to pass it.
          if (order_.Remove(key, at) == core::FairFiled::kSkipped) {
            ++lane_.fair_skipped;
          } else {
            (void)Cancelled(lane_, entry, true);
          }
        } else {
          const core::FairFiled filed = order_.FileLate(key, WeightOf(place_, key), at, id);
          if (filed == core::FairFiled::kNoSlot) {
            ++i;
            continue;
          }
          if (filed == core::FairFiled::kSkipped) ++lane_.fair_skipped;
        }
      }
      memmove(lane_.passed + i, lane_.passed + i + 1,
              sizeof(Passed) * static_cast<size_t>(lane_.passed_count - i - 1));
      --lane_.passed_count;
    }
  }

  // The cursor files every committed entry up to the last one placed (it
  // stays at one whose key finds no slot).
  void FileCursor() {
    // (Every segment is open. Nothing here allocates: it runs inside the
    // claim's Guard, whose error would skip a destructor.)
    (void)WalkCursor(
        lane_, rels_, nullptr, segments_, [&](HeapTupleData* tuple, TupleDesc desc, int segment) {
          const uint64 key = FairKeyOf(tuple, desc);
          const Offer entry = EntryAt(segment, tuple->t_self);
          if (lane_.cancelled_count > 0 && Cancelled(lane_, entry, false)) {
            // Past a skipping key's mark a sweep meets it again.
            if (order_.Skipping(key)) {
              ++lane_.fair_skipped;
            } else {
              (void)Cancelled(lane_, entry, true);
            }
            return Step::kNext;
          }
          switch (order_.File(key, WeightOf(place_, key),
                              FairPlaceOf(lane_.cursor_lap, tuple->t_self), IdOf(tuple, desc))) {
            case core::FairFiled::kSkipped:
              ++lane_.fair_skipped;
              break;
            case core::FairFiled::kNoSlot:
              return Step::kStay;
            default:
              break;
          }
          return Step::kNext;
        });
  }

  // A sweep (core/fair_order.h): reads behind the cursor from the skipping
  // keys' marks, filing their entries while they have room.
  void Sweep() {
    const core::FairPlace cursor = FairPlaceOf(lane_.cursor_lap, lane_.cursor);
    std::optional<core::FairPlace> place = order_.BeginSweep();
    if (!place) {
      order_.EndSweep(cursor, false);  // nothing to sweep: its flags read again
      return;
    }
    BlockNumber blocks[segments::kMaxSegments];
    std::fill(blocks, blocks + segments::kMaxSegments, InvalidBlockNumber);
    Buffer buffer = InvalidBuffer;
    int buffer_segment = -1;
    BlockNumber buffer_block = InvalidBlockNumber;
    core::FairPlace reached = *place;
    bool at_cursor = false;
    for (;;) {
      if (*place >= cursor) {
        at_cursor = true;
        break;
      }
      const FairAt at = FairAtOf(*place);
      const int segment = static_cast<int>(at.lap % segments_);
      Relation rel = rels_[segment];
      if (blocks[segment] == InvalidBlockNumber) blocks[segment] = RelationGetNumberOfBlocks(rel);
      if (at.block >= blocks[segment]) {  // on to the next lap's segment
        place = FairPlaceOf(at.lap + 1, 0, FirstOffsetNumber);
        continue;
      }
      if (at.offset < FirstOffsetNumber) {
        place = FairPlaceOf(at.lap, at.block, FirstOffsetNumber);
        continue;
      }
      if (buffer_segment != segment || buffer_block != at.block) {
        if (BufferIsValid(buffer)) UnlockReleaseBuffer(buffer);
        buffer = ReadBuffer(rel, at.block);
        LockBuffer(buffer, BUFFER_LOCK_SHARE);
        buffer_segment = segment;
        buffer_block = at.block;
      }
      Page page = BufferGetPage(buffer);
      if (at.offset > PageGetMaxOffsetNumber(page)) {
        place = FairPlaceOf(at.lap, at.block + 1, FirstOffsetNumber);
        continue;
      }
      HeapTupleData tuple;
      TupleDesc desc = RelationGetDescr(rel);
      if (RowAt(page, at.block, at.offset, RelationGetRelid(rel), &tuple) &&
          KindOf(&tuple, desc) == 'e' && Look(tuple.t_data, buffer) == Seen::kCommitted &&
          !(lane_.passed_count > 0 && InPassed(lane_, segment, tuple.t_self))) {
        const uint64 key = FairKeyOf(&tuple, desc);
        const Offer entry = EntryAt(segment, tuple.t_self);
        if (lane_.cancelled_count > 0 && Cancelled(lane_, entry, false)) {
          if (order_.Pass(key, *place)) {
            (void)Cancelled(lane_, entry, true);
            --lane_.fair_skipped;
          }
        } else if (order_.Sweep(key, WeightOf(place_, key), *place, IdOf(&tuple, desc)) ==
                   core::FairFiled::kFiled) {
          --lane_.fair_skipped;
        }
      }
      reached = *place + 1;
      place = order_.SweepNext(*place);
      if (!place) break;
    }
    if (BufferIsValid(buffer)) UnlockReleaseBuffer(buffer);
    order_.EndSweep(at_cursor ? cursor : reached, at_cursor);
  }

  Lane& lane_;
  core::FairOrder& order_;
  const std::vector<Relation>& rels_;
  const Place& place_;
  const int segments_;
  bool swept_ = false;
};

}  // namespace

std::vector<Claimed> Claim(const Place& place, int32 n, TimestampTz now, TimestampTz lease_until,
                           const Bound* before, std::vector<RowTurn>* row_turns) {
  std::vector<Claimed> claimed;
  if (n <= 0) return claimed;
  // No lane to be had: the ring's entries wait for one (the caller claims
  // from pgq.job_rows meanwhile). The operator is told, as for an enqueue
  // (the same minute's line covers both).
  const CallPin pin{LaneOf(place, true)};
  const int index = pin.index;
  if (index < 0) {
    if (TimeToLog(&shared->no_lane_logged_at)) {
      Guard([&] {
        ereport(LOG, (errmsg("pgq: queue %d found no lane free for its ring %d: the jobs there "
                             "wait until its database's queues in use leave it one",
                             place.queue_id, place.ring_id),
                      errdetail("Queues finding no lane in the next minute are not logged."),
                      errhint("Raise pgq.max_ring_queues_per_database (ALTER DATABASE ... SET) or "
                              "pgq.max_ring_queues (a restart).")));
      });
    }
    return claimed;
  }
  Lane& lane = shared->lanes[index];
  const int segments = static_cast<int>(place.leaves.size());
  // Past the room for leases, the jobs taken spill (below).
  const size_t leasable = static_cast<size_t>(LeaseRoom(n));
  ReserveUndo(static_cast<size_t>(n));
  claimed.reserve(static_cast<size_t>(n));
  // What the scan takes, filled under the claim lock: room made first.
  struct Taken {
    HeapTuple tuple;
    int32 attempt;
    int segment;
  };
  std::vector<Taken> taken;
  taken.reserve(static_cast<size_t>(n));
  std::vector<char> spilled(static_cast<size_t>(n), 0);
  std::vector<Relation> rels(static_cast<size_t>(segments), nullptr);
  std::vector<char> need(static_cast<size_t>(segments), 0);
  size_t wanted = static_cast<size_t>(n);
  const SubTransactionId sub = GetCurrentSubTransactionId();
  size_t noted = 0;            // the first of `taken` without its undo note
  bool fair_unserved = false;  // a fair queue found no fair order free
  Guard([&] {
    (void)GetCurrentTransactionId();  // the receipts are written below
    // attempt < 0: the entry's attempts spent + 1.
    // Taken if it comes before `before`; false (and nothing taken) if not.
    auto fetch = [&](int segment, ItemPointerData tid, int32 attempt, const Bound* bound) {
      Relation rel = rels[segment];
      Buffer buffer = ReadBuffer(rel, ItemPointerGetBlockNumber(&tid));
      LockBuffer(buffer, BUFFER_LOCK_SHARE);
      Page page = BufferGetPage(buffer);
      HeapTupleData tuple;
      // An entry handed out again is a committed row: its line pointer
      // stays until the segment is truncated.
      if (!RowAt(page, ItemPointerGetBlockNumber(&tid), ItemPointerGetOffsetNumber(&tid),
                 RelationGetRelid(rel), &tuple) ||
          !Precedes(&tuple, RelationGetDescr(rel), bound)) {
        UnlockReleaseBuffer(buffer);
        return false;
      }
      HeapTuple copy = heap_copytuple(&tuple);
      UnlockReleaseBuffer(buffer);
      if (attempt < 0) attempt = AttemptOf(copy, RelationGetDescr(rel)) + 1;
      taken.push_back(Taken{copy, attempt, segment});
      return true;
    };
    bool bounded = false;  // stopped at an entry that does not come before `before`
    // A fair lane (ADR 0029) opens every segment first: its sweeps read
    // behind the cursor, and its claims take from any segment. (Read here
    // without the lock, again under it.)
    const bool fair_hint = place.fair || lane.fair >= 0;
    if (fair_hint) std::fill(need.begin(), need.end(), 1);
    // Rounds: a segment is opened before the lock is taken (an open may
    // wait), so a claim that finds an entry in a segment it has not opened
    // lets the lock go, opens it and comes back. At most one round per
    // segment the cursor enters and one for the entries handed out again.
    for (int round = 0; round < 2 * segments + 2 && taken.size() < wanted; ++round) {
      const int hint = lane.cursor_segment;  // read without the lock: looked at again under it
      if (hint >= 0 && hint < segments) need[hint] = 1;
      for (int k = 0; k < segments; ++k) {
        if (need[k] && rels[k] == nullptr) rels[k] = table_open(place.leaves[k], AccessShareLock);
      }
      bool blocked = false;  // an entry waits in a segment not yet open
      LWLockAcquire(lane.claim_lock, LW_EXCLUSIVE);
      if (place.fair && lane.fair < 0 && !AttachFair(lane, index) &&
          TimeToLog(&shared->fair_logged_at)) {
        fair_unserved = true;  // logged below, outside the lock
      }
      core::FairOrder* fair = FairOf(lane);
      if (fair != nullptr && std::find(rels.begin(), rels.end(), nullptr) != rels.end()) {
        std::fill(need.begin(), need.end(), 1);  // it became fair meanwhile: every segment
        LWLockRelease(lane.claim_lock);
        continue;
      }
      const Bound* bound = fair != nullptr ? nullptr : before;  // fair order is no ring order
      // Given back first, oldest first.
      int from = 0;
      while (taken.size() < wanted && from < lane.returned_count && !bounded) {
        const Offer offer = lane.returned[from];
        if (rels[offer.segment] == nullptr) {
          need[offer.segment] = 1;
          blocked = true;
          break;
        }
        if (!fetch(offer.segment, offer.tid, offer.attempt, bound)) {
          bounded = true;
          break;
        }
        ++from;
      }
      if (from > 0) {
        memmove(lane.returned, lane.returned + from,
                sizeof(Offer) * static_cast<size_t>(lane.returned_count - from));
        lane.returned_count -= from;
      }
      // Passed and new entries: no more than the given-back list has room
      // for if this and every other claim in progress roll back (an entry
      // taken from the list above left its slot for itself).
      const int64 out = static_cast<int64>(pg_atomic_read_u32(&lane.reserved)) +
                        static_cast<int64>(taken.size() - noted);
      const int64 room = kReturnedMax - lane.returned_count - out;
      wanted = std::min(wanted, taken.size() + static_cast<size_t>(std::max<int64>(room, 0)));
      if (fair != nullptr && !blocked) {
        // In fair order: what the passed set and the cursor file, then the
        // head of the key whose turn it is, each time.
        // Read under the lock: the claims' clock never goes back.
        fair->SetClock(Now(), place.key_rate);
        FairLane fair_lane(lane, *fair, rels, place);
        fair_lane.Prepare();
        while (taken.size() < wanted) {
          const std::optional<FairLane::Turn> next = fair_lane.Next(true);
          if (!next) break;
          ++lane.fair_ring_claims;
          if (next->row == 0) {
            (void)fetch(next->segment, next->tid, -1, nullptr);
          } else if (row_turns != nullptr) {
            // The caller claims it: one fewer entry wanted.
            row_turns->push_back(RowTurn{next->row, next->grouped});
            --wanted;
          }
        }
        // Its queue is fair no more: the order serves what it holds, then
        // goes (the cursor hands out in ring order from where it is).
        if (!place.fair && fair->FiledCount() == 0 && fair->SkippingKeys() == 0) {
          DetachFair(lane);
        }
      }
      for (int i = 0; fair == nullptr && !blocked && !bounded && i < lane.passed_count &&
                      taken.size() < wanted;) {
        const Passed passed = lane.passed[i];
        if (TransactionIdIsInProgress(passed.xid)) {
          ++i;
          continue;
        }
        const Offer entry{passed.tid, 0, passed.segment};
        if (TransactionIdDidCommit(passed.xid) &&
            !(lane.cancelled_count > 0 && Cancelled(lane, entry, true))) {
          if (rels[passed.segment] == nullptr) {
            need[passed.segment] = 1;
            blocked = true;
            break;
          }
          if (!fetch(passed.segment, passed.tid, -1, bound)) {
            bounded = true;  // kept in the set
            break;
          }
        }
        // Kept in the order they were passed: handed out in claim order.
        memmove(lane.passed + i, lane.passed + i + 1,
                sizeof(Passed) * static_cast<size_t>(lane.passed_count - i - 1));
        --lane.passed_count;
      }
      // The cursor, through its segment and on into the next one once
      // entries have left it for good.
      if (fair == nullptr && !blocked && !bounded && taken.size() < wanted) {
        blocked = !WalkCursor(
            lane, rels, &need, segments, [&](HeapTupleData* tuple, TupleDesc desc, int segment) {
              if (lane.cancelled_count > 0 &&
                  Cancelled(lane, Offer{tuple->t_self, 0, static_cast<int16>(segment)}, true)) {
                return Step::kNext;
              }
              if (!Precedes(tuple, desc, bound)) {
                bounded = true;
                return Step::kStay;
              }
              taken.push_back(Taken{heap_copytuple(tuple), AttemptOf(tuple, desc) + 1, segment});
              return taken.size() < wanted ? Step::kNext : Step::kStop;
            });
      }
      // What this round took, noted before the lock goes (an open of a
      // segment in the next round may fail: a rollback gives these back),
      // and set aside in the given-back list's room.
      for (; noted < taken.size(); ++noted) {
        const Taken& t = taken[noted];
        const int64 id = IdOf(t.tuple, RelationGetDescr(rels[t.segment]));
        Lease lease{};
        lease.database = MyDatabaseId;
        lease.queue_id = place.queue_id;
        lease.ring_id = place.ring_id;
        lease.attempt = t.attempt;
        lease.lane = index;
        lease.claim_xid = GetCurrentTransactionId();  // assigned above
        undo->push_back(Undo{sub, UndoKind::kGiveBack, LeaseKey{MyDatabaseId, id}, lease, index,
                             Offer{t.tuple->t_self, t.attempt, static_cast<int16>(t.segment)}});
        pg_atomic_fetch_add_u32(&lane.reserved, 1);
      }
      if (!taken.empty()) Keep(index);  // an abort gives them back to this lane
      LWLockRelease(lane.claim_lock);
      if (!blocked) break;
    }
    if (taken.empty()) {
      for (Relation rel : rels) {
        if (rel != nullptr) table_close(rel, NoLock);
      }
      return;
    }
    // The receipts, in their entries' segments (one insert each); the
    // leases entered. A job past the room for leases (the database's share
    // of the lease map, or the map, full) spills: a closure 'm' in place of
    // its receipt, and the caller makes it a running row of pgq.job_rows in
    // this transaction, as a running ring job is moved there (a rollback
    // takes both back and gives the entry back, as any claim's).
    for (size_t i = leasable; i < taken.size(); ++i) spilled[i] = 1;
    for (int segment = 0; segment < segments; ++segment) {
      int count = 0;
      for (const Taken& t : taken) count += t.segment == segment;
      if (count == 0) continue;
      Relation receipts = table_open(place.leaves[segment], RowExclusiveLock);
      TupleDesc desc = RelationGetDescr(receipts);
      HeapTuple* rows = static_cast<HeapTuple*>(palloc(sizeof(HeapTuple) * count));
      int row_count = 0;
      for (size_t i = 0; i < taken.size(); ++i) {
        const Taken& t = taken[i];
        if (t.segment != segment) continue;
        const int64 id = IdOf(t.tuple, desc);
        Lease lease{MyDatabaseId,
                    place.queue_id,
                    place.ring_id,
                    t.attempt,
                    lease_until,
                    place.leaves[segment],
                    t.tuple->t_self,
                    GetCurrentTransactionId(),
                    index,
                    now,
                    InvalidTransactionId,
                    MyProcPid,
                    GroupedOf(t.tuple, desc),
                    KeyedOf(t.tuple, desc)};
        // A fair queue's running jobs per key (BusiestFairKeys); no hash for
        // the others' claims.
        if (lease.grouped && place.fair) lease.fair_key = FairKeyOf(t.tuple, desc);
        // (Its undo note, made when it was taken, gives it back if the
        // transaction aborts.) The map found full meanwhile: it spills too.
        const bool leased = spilled[i] == 0 && PutLease(LeaseKey{MyDatabaseId, id}, lease);
        spilled[i] = leased ? 0 : 1;
        Row row(place, segment, leased ? 'r' : 'c', id, t.attempt);
        row.Set(kAt, TimestampTzGetDatum(now));
        if (leased) {
          row.Set(kLeaseUntil, TimestampTzGetDatum(lease_until));
          row.Set(kClaimedBy, Int32GetDatum(MyProcPid));
        } else {
          row.Set(kOutcome, CharGetDatum('m'));
        }
        rows[row_count++] = heap_form_tuple(desc, row.values, row.nulls);
      }
      InsertRows(receipts, rows, row_count, 0);
      table_close(receipts, NoLock);
    }
    // In the order they were taken (claim order).
    for (const Taken& t : taken) {
      TupleDesc desc = RelationGetDescr(rels[t.segment]);
      bool is_null;
      claimed.push_back(Claimed{
          IdOf(t.tuple, desc), t.attempt, spilled[&t - taken.data()] != 0,
          DatumGetInt32(heap_getattr(t.tuple, kMaxAttempts, desc, &is_null)),
          DatumGetInt32(heap_getattr(t.tuple, kPriority, desc, &is_null)),
          DatumGetTimestampTz(heap_getattr(t.tuple, kRunAt, desc, &is_null)),
          DatumGetTimestampTz(heap_getattr(t.tuple, kEnqueuedAt, desc, &is_null)),
          heap_getattr(t.tuple, kPayload, desc, &is_null), GroupKeyOf(t.tuple, desc),
          DedupeKeyOf(t.tuple, desc), DedupeForOf(t.tuple, desc), TraceContextOf(t.tuple, desc)});
    }
    for (Relation rel : rels) {
      if (rel != nullptr) table_close(rel, NoLock);
    }
  });
  if (fair_unserved) {
    Guard([&] {
      ereport(LOG, (errmsg("pgq: queue %d found no fair order free: its jobs are handed out in "
                           "the order they came until one is",
                           place.queue_id),
                    errdetail("Queues finding none in the next minute are not logged."),
                    errhint("Raise pgq.max_fair_queues_per_database (ALTER DATABASE ... SET) or "
                            "pgq.max_fair_queues (a restart).")));
    });
  }
  // An operator's sign that the share is too small (the jobs are not
  // refused, so nothing else tells).
  const int spilled_count = static_cast<int>(std::count(spilled.begin(), spilled.end(), 1));
  if (spilled_count > 0 && TimeToLog(&shared->spill_logged_at)) {
    Guard([&] {
      ereport(LOG, (errmsg("pgq: a claim of queue %d ran %d of its jobs as rows of "
                           "pgq.job_rows: no room was left for their leases",
                           place.queue_id, spilled_count),
                    errdetail("Spills of any queue in the next minute are not logged."),
                    errhint("Raise pgq.max_running_ring_jobs_per_database (ALTER DATABASE ... "
                            "SET) or pgq.max_running_ring_jobs (a restart).")));
    });
  }
  return claimed;
}

namespace {

// Whether the claim that entered `lease` has committed (or is this
// transaction's own): a lease is entered at the claim, before its commit,
// and a completion of an attempt not yet committed must not land — if the
// claim then rolled back, its entry would be handed out again after it was
// closed. (A table job's row lock makes such a completion wait; here it is
// refused, as for an attempt that does not hold the job.) Called under the
// lease's partition lock: TransactionIdIsInProgress only reads.
bool Held(const Lease& lease) {
  const TransactionId xid = lease.claim_xid;
  if (!TransactionIdIsValid(xid) || TransactionIdIsCurrentTransactionId(xid)) return true;
  return !TransactionIdIsInProgress(xid) && TransactionIdDidCommit(xid);
}

// Runs fn(slot, key, hash) on the lease of `id` of this database (slot
// nullptr: none) under its partition's lock, held in `mode`.
// INVARIANT: fn neither throws nor raises (a lock is held).
template <typename Fn>
bool WithLease(int64 id, LWLockMode mode, Fn&& fn) {
  const LeaseKey key{MyDatabaseId, id};
  const uint32 hash = get_hash_value(leases, &key);
  LWLockAcquire(LeaseLock(hash), mode);
  bool found;
  LeaseSlot* slot =
      static_cast<LeaseSlot*>(hash_search_with_hash_value(leases, &key, hash, HASH_FIND, &found));
  const bool result = fn(found ? slot : nullptr, key, hash);
  LWLockRelease(LeaseLock(hash));
  return result;
}

// The segment of the ring that `relid` is, or -1 (a table of an earlier
// ring of the queue).
int SegmentOf(const Place& place, Oid relid) {
  for (size_t k = 0; k < place.leaves.size(); ++k) {
    if (place.leaves[k] == relid) return static_cast<int>(k);
  }
  return -1;
}

// Whether the lease holds now (the partition lock held exclusively): not
// taken out by a transaction still in progress or this one; a closer that
// ended is settled first (committed: the lease is gone, `slot` with it).
// `wait_for`: the closer in progress, if any.
bool HoldsNow(LeaseSlot* slot, uint32 hash, TransactionId* wait_for) {
  const Closer closer = CloserOf(slot->lease);
  if (closer == Closer::kInProgress && wait_for != nullptr) *wait_for = slot->lease.closer_xid;
  if (closer == Closer::kCommitted || closer == Closer::kAborted) return Settle(slot, hash, closer);
  return closer == Closer::kNone;
}

// Takes the lease of (id, attempt) out if it is the live one of the ring
// at `place` (the fence): it stays in the map, closing by this
// transaction, until the transaction ends; `segment`: its entry's.
// `wait_for`: another transaction's take-out in progress.
bool TakeLease(const Place& place, int64 id, int32 attempt, int* segment, TransactionId* wait_for,
               Lease* taken_lease = nullptr) {
  const TransactionId xid = GetCurrentTransactionId();
  return WithLease(id, LW_EXCLUSIVE, [&](LeaseSlot* slot, const LeaseKey& key, uint32 hash) {
    if (slot == nullptr || !HoldsNow(slot, hash, wait_for)) return false;
    if (slot->lease.attempt != attempt || !Held(slot->lease)) return false;
    // A lease of an earlier ring of the queue (the extension made again
    // while the server ran, its ids drawn again) holds nothing here.
    *segment = SegmentOf(place, slot->lease.entry_relid);
    if (*segment < 0) return false;
    if (taken_lease != nullptr) *taken_lease = slot->lease;
    Undo taken{GetCurrentSubTransactionId(), UndoKind::kReturnLease, key, slot->lease, -1, {}};
    taken.xid = xid;
    undo->push_back(taken);
    pg_atomic_fetch_sub_u32(&CountOf(slot->lease), 1);
    slot->lease.closer_xid = xid;
    pg_atomic_fetch_add_u32(&CountOf(slot->lease), 1);
    return true;
  });
}

}  // namespace

int64 RunningCount(const Place& place) {
  const CallPin pin{shared == nullptr ? -1 : LaneOf(place, true)};
  const int index = pin.index;
  if (index < 0) return 0;
  const Lane& lane = shared->lanes[index];
  return static_cast<int64>(pg_atomic_read_u32(const_cast<pg_atomic_uint32*>(&lane.leases))) +
         pg_atomic_read_u32(const_cast<pg_atomic_uint32*>(&lane.closing));
}

uint32 LanesEpoch() { return shared == nullptr ? 0 : pg_atomic_read_u32(&shared->lanes_epoch); }

void NoteDependents(const Place& place) {
  if (shared == nullptr) return;
  const CallPin pin{LaneOf(place, true)};
  const int index = pin.index;
  pg_atomic_write_u32(&shared->any_dependents, 1);
  if (index >= 0) {
    pg_atomic_write_u32(&shared->lanes[index].dependents, 1);
  } else {
    // No lane to be had (so none of its jobs runs): noted for the lane its
    // queue takes later, unless one was taken meanwhile.
    Guard([&] {
      LWLockAcquire(shared->lanes_lock, LW_EXCLUSIVE);
      bool found = false;
      for (int i = 0; i < shared->lane_count; ++i) {
        Lane& lane = shared->lanes[i];
        if (lane.database == MyDatabaseId && lane.ring_id == place.ring_id) {
          pg_atomic_write_u32(&lane.dependents, 1);
          found = true;
        }
      }
      if (!found) NoteLater(MyDatabaseId, place.ring_id);
      LWLockRelease(shared->lanes_lock);
    });
  }
  // Before the caller's look at the job (a lease's partition lock, the
  // claim lock): whoever ends a job after that look sees the note.
  pg_memory_barrier();
}

void NoteDependentsOfDatabase() {
  if (shared == nullptr) return;
  pg_atomic_write_u32(&shared->any_dependents, 1);
  Guard([] {
    LWLockAcquire(shared->lanes_lock, LW_EXCLUSIVE);
    for (int i = 0; i < shared->lane_count; ++i) {
      Lane& lane = shared->lanes[i];
      if (lane.database == MyDatabaseId) pg_atomic_write_u32(&lane.dependents, 1);
    }
    NoteLater(MyDatabaseId, -1);  // and the lanes its queues take later
    LWLockRelease(shared->lanes_lock);
  });
  pg_memory_barrier();
}

bool MayHaveDependents(const Place& place) {
  if (shared == nullptr || pg_atomic_read_u32(&shared->any_dependents) == 0) return false;
  const CallPin pin{LaneOf(place, true)};
  const int index = pin.index;
  return index >= 0 && pg_atomic_read_u32(&shared->lanes[index].dependents) != 0;
}

TransactionId CancelInProgress(const Place& place, int segment, ItemPointerData entry) {
  const CallPin pin{shared == nullptr ? -1 : LaneOf(place, true)};
  const int index = pin.index;
  if (index < 0) return InvalidTransactionId;
  Lane& lane = shared->lanes[index];
  const Offer offer{entry, 0, static_cast<int16>(segment)};
  TransactionId found = InvalidTransactionId;
  Guard([&] {
    LWLockAcquire(lane.claim_lock, LW_SHARED);
    for (int i = 0; i < lane.cancelled_count && !TransactionIdIsValid(found); ++i) {
      const Tomb& tomb = lane.cancelled[i];
      if (SameEntry(tomb, offer) && !TransactionIdIsCurrentTransactionId(tomb.xid) &&
          TransactionIdIsInProgress(tomb.xid)) {
        found = tomb.xid;
      }
    }
    LWLockRelease(lane.claim_lock);
  });
  return found;
}

bool Build(const Place& place) {
  if (shared == nullptr) return false;
  const CallPin pin{LaneOf(place, true)};
  return pin.index >= 0;
}

bool LanesEnsured(uint32 epoch) {
  if (shared == nullptr) return false;
  return Guard([&] {
    bool ensured = false;
    LWLockAcquire(shared->lanes_lock, LW_SHARED);
    for (const Shared::Ensured& e : shared->ensured) {
      ensured = ensured || (e.database == MyDatabaseId && e.epoch == epoch);
    }
    LWLockRelease(shared->lanes_lock);
    return ensured;
  });
}

void NoteLanesEnsured(uint32 epoch) {
  if (shared == nullptr) return;
  Guard([&] {
    LWLockAcquire(shared->lanes_lock, LW_EXCLUSIVE);
    const uint32 now = pg_atomic_read_u32(&shared->lanes_epoch);
    Shared::Ensured* slot = nullptr;
    for (Shared::Ensured& e : shared->ensured) {
      if (e.database == MyDatabaseId) slot = &e;
    }
    for (Shared::Ensured& e : shared->ensured) {
      if (slot == nullptr && (e.database == InvalidOid || e.epoch != now)) slot = &e;
    }
    if (slot != nullptr) *slot = Shared::Ensured{MyDatabaseId, epoch};
    LWLockRelease(shared->lanes_lock);
  });
}

bool AnyLeases() { return shared != nullptr && pg_atomic_read_u32(&shared->leases) != 0; }

bool FindLease(int64 id, Lease* lease, TransactionId* wait_for) {
  *wait_for = InvalidTransactionId;
  if (!AnyLeases()) return false;
  return Guard([&] {
    return WithLease(id, LW_SHARED, [&](LeaseSlot* slot, const LeaseKey&, uint32) {
      if (slot == nullptr) return false;
      *lease = slot->lease;
      switch (CloserOf(slot->lease)) {
        case Closer::kNone:
        case Closer::kAborted:  // holds again (settled by whoever takes it out)
          lease->closer_xid = InvalidTransactionId;
          return true;
        case Closer::kInProgress:
          *wait_for = slot->lease.closer_xid;
          return true;
        case Closer::kOurs:
        case Closer::kCommitted:
          return false;  // closed: where it went says what it is now
      }
      return false;
    });
  });
}

void WaitForCloser(TransactionId xid) {
  Guard([&] { XactLockTableWait(xid, nullptr, nullptr, XLTW_None); });
}

int Close(const Place& place, const int64* ids, const int32* attempts, int count, char outcome,
          TimestampTz now, bool* closed, TransactionId* wait_for) {
  if (leases == nullptr || count == 0) return 0;
  ReserveUndo(static_cast<size_t>(count));
  int done = 0;
  Guard([&] {
    (void)GetCurrentTransactionId();
    // Each closure goes to its entry's segment: one insert per segment.
    std::vector<int> segment_of(static_cast<size_t>(count), -1);
    std::vector<Lease> taken(static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) {
      closed[i] = TakeLease(place, ids[i], attempts[i], &segment_of[i],
                            wait_for == nullptr ? nullptr : &wait_for[i], &taken[i]);
      done += closed[i];
    }
    HeapTuple* rows = static_cast<HeapTuple*>(palloc(sizeof(HeapTuple) * count));
    for (int segment = 0; segment < static_cast<int>(place.leaves.size()); ++segment) {
      Relation rel = nullptr;
      int row_count = 0;
      for (int i = 0; i < count; ++i) {
        if (segment_of[i] != segment) continue;
        if (rel == nullptr) rel = table_open(place.leaves[segment], RowExclusiveLock);
        Row row(place, segment, 'c', ids[i], attempts[i]);
        row.Set(kAt, TimestampTzGetDatum(now));
        row.Set(kOutcome, CharGetDatum(outcome));
        if (taken[i].claim_no != 0) row.Set(kEntry, Int64GetDatum(taken[i].claim_no));
        rows[row_count++] = heap_form_tuple(RelationGetDescr(rel), row.values, row.nulls);
      }
      if (rel != nullptr) {
        InsertRows(rel, rows, row_count, 0);
        table_close(rel, NoLock);
      }
    }
  });
  return done;
}

void CloseEntry(const Place& place, int segment, int64 id, int32 attempt, char outcome,
                TimestampTz now) {
  Guard([&] {
    (void)GetCurrentTransactionId();
    Relation rel = table_open(place.leaves[segment], RowExclusiveLock);
    Row row(place, segment, 'c', id, attempt);
    row.Set(kAt, TimestampTzGetDatum(now));
    row.Set(kOutcome, CharGetDatum(outcome));
    HeapTuple tuple = heap_form_tuple(RelationGetDescr(rel), row.values, row.nulls);
    InsertRows(rel, &tuple, 1, 0);
    table_close(rel, NoLock);
  });
}

bool Close(const Place& place, int64 id, int32 attempt, char outcome, TimestampTz now,
           TransactionId* wait_for) {
  bool closed = false;
  Close(place, &id, &attempt, 1, outcome, now, &closed, wait_for);
  return closed;
}

bool Extend(const Place& place, int64 id, int32 attempt, TimestampTz now, TimestampTz lease_until,
            TransactionId* wait_for) {
  if (wait_for != nullptr) *wait_for = InvalidTransactionId;
  if (leases == nullptr) return false;
  ReserveUndo(1);
  bool extended = false;
  Guard([&] {
    int segment = -1;
    Lease was{};
    extended = WithLease(id, LW_EXCLUSIVE, [&](LeaseSlot* slot, const LeaseKey& key, uint32 hash) {
      if (slot == nullptr || !HoldsNow(slot, hash, wait_for)) return false;
      if (slot->lease.attempt != attempt || !Held(slot->lease)) return false;
      segment = SegmentOf(place, slot->lease.entry_relid);
      if (segment < 0) return false;  // a lease of an earlier ring (TakeLease)
      undo->push_back(
          Undo{GetCurrentSubTransactionId(), UndoKind::kRestoreLease, key, slot->lease, -1, {}});
      was = slot->lease;
      slot->lease.lease_until = lease_until;
      return true;
    });
    if (!extended) return;
    // In the entry's segment, as the claim's receipt.
    Relation rel = table_open(place.leaves[segment], RowExclusiveLock);
    Row row(place, segment, 'r', id, attempt);
    row.Set(kLeaseUntil, TimestampTzGetDatum(lease_until));
    row.Set(kAt, TimestampTzGetDatum(now));
    if (was.claim_no != 0) row.Set(kEntry, Int64GetDatum(was.claim_no));
    HeapTuple tuple = heap_form_tuple(RelationGetDescr(rel), row.values, row.nulls);
    InsertRows(rel, &tuple, 1, 0);
    table_close(rel, NoLock);
  });
  return extended;
}

bool ReadEntry(const Lease& lease, NewEntry* entry) {
  bool found = false;
  Guard([&] {
    Relation rel = table_open(lease.entry_relid, AccessShareLock);
    Buffer buffer = ReadBuffer(rel, ItemPointerGetBlockNumber(&lease.entry));
    LockBuffer(buffer, BUFFER_LOCK_SHARE);
    Page page = BufferGetPage(buffer);
    HeapTupleData tuple;
    if (RowAt(page, ItemPointerGetBlockNumber(&lease.entry),
              ItemPointerGetOffsetNumber(&lease.entry), lease.entry_relid, &tuple)) {
      HeapTuple copy = heap_copytuple(&tuple);
      TupleDesc desc = RelationGetDescr(rel);
      bool is_null;
      entry->id = IdOf(copy, desc);
      entry->priority = DatumGetInt32(heap_getattr(copy, kPriority, desc, &is_null));
      entry->max_attempts = DatumGetInt32(heap_getattr(copy, kMaxAttempts, desc, &is_null));
      entry->run_at = DatumGetTimestampTz(heap_getattr(copy, kRunAt, desc, &is_null));
      entry->enqueued_at = DatumGetTimestampTz(heap_getattr(copy, kEnqueuedAt, desc, &is_null));
      entry->payload = heap_getattr(copy, kPayload, desc, &is_null);
      entry->group_key = GroupKeyOf(copy, desc);
      entry->dedupe_key = DedupeKeyOf(copy, desc);
      entry->dedupe_for = DedupeForOf(copy, desc);
      entry->last_error = LastErrorOf(copy, desc);
      entry->trace_context = TraceContextOf(copy, desc);
      found = true;
    }
    UnlockReleaseBuffer(buffer);
    table_close(rel, AccessShareLock);
  });
  return found;
}

std::vector<std::pair<int64, Lease>> Expired(TimestampTz now, int max,
                                             std::vector<std::pair<int64, Lease>>* abandoned) {
  std::vector<std::pair<int64, Lease>> out;
  // Every database's maintenance asks each pass: nothing to walk while no
  // ring job runs anywhere.
  if (!AnyLeases()) return out;
  out.reserve(static_cast<size_t>(max));  // nothing thrown while the locks are held
  abandoned->reserve(static_cast<size_t>(max));
  // Leases whose closer ended: settled below (a prepared transaction's, or
  // one whose backend has not reached its end-of-transaction callback).
  std::vector<LeaseKey> ended;
  ended.reserve(static_cast<size_t>(max));
  // The walk in Guard (CloserOf and Held ask the commit log, which may
  // raise): a PostgreSQL error there is rethrown after it and the abort
  // lets go of the locks; nothing allocates (room made above).
  Guard([&] {
    for (int i = 0; i < kLeasePartitions; ++i) LWLockAcquire(&lease_locks[i].lock, LW_SHARED);
    HASH_SEQ_STATUS scan;
    hash_seq_init(&scan, leases);
    while (LeaseSlot* slot = static_cast<LeaseSlot*>(hash_seq_search(&scan))) {
      if (slot->key.database != static_cast<int64>(MyDatabaseId)) continue;
      if (TransactionIdIsValid(slot->lease.closer_xid)) {
        const Closer closer = CloserOf(slot->lease);
        if ((closer == Closer::kCommitted || closer == Closer::kAborted) &&
            ended.size() < ended.capacity()) {
          ended.push_back(slot->key);
        }
        continue;  // a closer's to end; expired, if still so, at the next pass
      }
      // A prepared claim that rolled back (its backend's callback ran at
      // PREPARE, nothing of ours runs at ROLLBACK PREPARED): the lease fences
      // nothing and counts against a cap. Only a prepared one: an ordinary
      // claim's rollback is in the commit log before its own callback drops
      // the lease and gives the entry back, and giving it back here too
      // would hand it out twice.
      const TransactionId claim = slot->lease.claim_xid;
      if (slot->lease.prepared && TransactionIdIsValid(claim) &&
          !TransactionIdIsInProgress(claim) && !TransactionIdDidCommit(claim)) {
        if (static_cast<int>(abandoned->size()) < max) {
          abandoned->emplace_back(slot->key.id, slot->lease);
        }
        continue;
      }
      // A lease whose claim has not committed is not the maintenance's yet.
      if (slot->lease.lease_until >= now || !Held(slot->lease)) continue;
      if (static_cast<int>(out.size()) >= max) {
        hash_seq_term(&scan);
        break;
      }
      out.emplace_back(slot->key.id, slot->lease);
    }
    for (int i = 0; i < kLeasePartitions; ++i) LWLockRelease(&lease_locks[i].lock);
  });
  for (const LeaseKey& key : ended) {
    Guard([&] {
      WithSlot(key, [](LeaseSlot* slot, uint32 hash) {
        if (slot != nullptr) (void)HoldsNow(slot, hash, nullptr);
      });
    });
  }
  return out;
}

bool GiveUpClaim(const Place& place, int64 id, const Lease& lease, int segment) {
  bool dropped = false;
  Guard([&] {
    WithSlot(LeaseKey{MyDatabaseId, id}, [&](LeaseSlot* slot, uint32 hash) {
      // Still that prepared claim's, and nobody is closing it (a claim
      // replaced it, or a closer took it out, meanwhile: theirs now).
      if (slot == nullptr || !slot->lease.prepared || slot->lease.claim_xid != lease.claim_xid ||
          TransactionIdIsValid(slot->lease.closer_xid)) {
        return;
      }
      RemoveSlot(slot, hash);
      dropped = true;
    });
  });
  // An 'a' entry was a row of pgq.job_rows, pending again with the
  // rollback; an entry taken from the ring goes back to its lane, as the
  // claim's own rollback gives it back (UndoOne).
  if (!dropped || lease.claim_no != 0 || segment < 0) return dropped;
  const CallPin pin{LaneOf(place, true)};
  if (pin.index < 0) return dropped;  // no lane now: the next build finds it pending
  Lane& lane = shared->lanes[pin.index];
  // In Guard: the pin's destructor must run whatever the lock does.
  const bool room = Guard([&] {
    LWLockAcquire(lane.claim_lock, LW_EXCLUSIVE);
    const bool has_room = lane.returned_count < kReturnedMax;
    if (has_room) {
      lane.returned[lane.returned_count++] =
          Offer{lease.entry, lease.attempt, static_cast<int16>(segment)};
    }
    LWLockRelease(lane.claim_lock);
    return has_room;
  });
  if (!room) {
    // As UndoOne's: it comes back at the queue's next rebuild.
    Guard([&] { elog(WARNING, "pgq: queue %d has too many jobs to give back", place.queue_id); });
  }
  return dropped;
}

std::vector<std::pair<int64, Lease>> RunningIn(Oid segment_relid, int max) {
  std::vector<std::pair<int64, Lease>> out;
  if (!AnyLeases()) return out;
  out.reserve(static_cast<size_t>(max));  // nothing thrown while the locks are held
  Guard([&] {                             // as Expired's walk
    for (int i = 0; i < kLeasePartitions; ++i) LWLockAcquire(&lease_locks[i].lock, LW_SHARED);
    HASH_SEQ_STATUS scan;
    hash_seq_init(&scan, leases);
    while (LeaseSlot* slot = static_cast<LeaseSlot*>(hash_seq_search(&scan))) {
      const Lease& lease = slot->lease;
      if (slot->key.database != static_cast<int64>(MyDatabaseId) ||
          lease.entry_relid != segment_relid || TransactionIdIsValid(lease.closer_xid) ||
          !Held(lease)) {
        continue;
      }
      if (static_cast<int>(out.size()) >= max) {
        hash_seq_term(&scan);
        break;
      }
      out.emplace_back(slot->key.id, lease);
    }
    for (int i = 0; i < kLeasePartitions; ++i) LWLockRelease(&lease_locks[i].lock);
  });
  return out;
}

int Peek(const Place& place, Bound* next, int max_keys) {
  if (shared == nullptr || max_keys <= 0) return 0;
  const CallPin pin{LaneOf(place, true)};
  if (pin.index < 0) return 0;  // no lane: nothing of the ring is handed out
  Lane& lane = shared->lanes[pin.index];
  const int segments = static_cast<int>(place.leaves.size());
  std::vector<Relation> rels(static_cast<size_t>(segments), nullptr);
  int found = 0;
  const auto full = [&] { return found >= max_keys; };
  Guard([&] {
    // Every segment opened first: no open under the lock.
    for (int k = 0; k < segments; ++k) rels[k] = table_open(place.leaves[k], AccessShareLock);
    // Reads the key of a committed entry; false if it is not one (or is a
    // tombstone's).
    auto key_of = [&](int segment, HeapTupleData* tuple, Buffer buffer) {
      TupleDesc desc = RelationGetDescr(rels[segment]);
      if (Look(tuple->t_data, buffer) != Seen::kCommitted || KindOf(tuple, desc) != 'e')
        return false;
      if (lane.cancelled_count > 0 &&
          Cancelled(lane, Offer{tuple->t_self, 0, static_cast<int16>(segment)}, false)) {
        return false;
      }
      bool is_null;
      next[found].run_at = DatumGetTimestampTz(heap_getattr(tuple, kRunAt, desc, &is_null));
      next[found].id = IdOf(tuple, desc);
      ++found;
      return true;
    };
    // Looks at the entry at `tid` of `segment` (a given-back or passed one).
    auto look_at = [&](int segment, ItemPointerData tid) {
      VisitRow(rels[segment], tid,
               [&](HeapTupleData* tuple, Buffer buffer) { (void)key_of(segment, tuple, buffer); });
    };
    // Exclusively: the cursor is moved on past what a claim would pass
    // over too (below).
    LWLockAcquire(lane.claim_lock, LW_EXCLUSIVE);
    // What a claim would take first: given back, passed and committed,
    // then the cursor's next entry (in its segment, then on).
    for (int i = 0; !full() && i < lane.returned_count; ++i) {
      look_at(lane.returned[i].segment, lane.returned[i].tid);
    }
    if (core::FairOrder* fair = FairOf(lane)) {
      // A fair lane's next entry in fair order (one: the ones after it
      // depend on the keys' turns), after what its claim files first.
      if (!full()) {
        FairLane fair_lane(lane, *fair, rels, place);
        fair_lane.Prepare();
        // (A due row of pgq.job_rows first: no entry to look at.)
        const std::optional<FairLane::Turn> first = fair_lane.Next(false);
        if (first && first->row == 0) look_at(first->segment, first->tid);
      }
      LWLockRelease(lane.claim_lock);
      for (Relation rel : rels) table_close(rel, NoLock);
      return;
    }
    for (int i = 0; !full() && i < lane.passed_count; ++i) {
      const Passed& passed = lane.passed[i];
      if (!TransactionIdIsInProgress(passed.xid) && TransactionIdDidCommit(passed.xid)) {
        look_at(passed.segment, passed.tid);
      }
    }
    int segment = lane.cursor_segment;
    ItemPointerData at = lane.cursor;
    // The rows at the cursor that are no entry (receipts and closures
    // appended after the last entry handed out, rolled-back rows), which a
    // claim would walk over: the cursor is moved past them, so that the
    // peeks of a ring with nothing left to hand out (a merged claim peeks
    // every ring of its queue each round) do not read them again each time.
    // Up to the first entry, whatever its state, within what is read (up
    // to the block entries are placed on, below).
    bool skipping = true;
    ItemPointerData skip_to = lane.cursor;
    for (int k = 0; !full() && k < segments; ++k) {
      const bool left = lane.insert_segment != segment;
      pg_read_barrier();
      const BlockNumber blocks = RelationGetNumberOfBlocks(rels[segment]);
      // No entry lies past the block entries are placed on while they still
      // go to this segment (only receipts and closures do): read up to it,
      // as a claim's walk (an entry appended meanwhile on a new last block
      // is seen by the next look).
      const BlockNumber last =
          left || lane.insert_block == InvalidBlockNumber ? blocks - 1 : lane.insert_block;
      TupleDesc desc = RelationGetDescr(rels[segment]);
      for (BlockNumber block = ItemPointerGetBlockNumber(&at);
           !full() && block < blocks && block <= last; ++block) {
        const OffsetNumber first = block == ItemPointerGetBlockNumber(&at)
                                       ? ItemPointerGetOffsetNumber(&at)
                                       : FirstOffsetNumber;
        VisitBlock(rels[segment], block, first, [&](HeapTupleData* tuple, Buffer buffer) {
          if (skipping && k == 0) {
            if (Look(tuple->t_data, buffer) != Seen::kGone && KindOf(tuple, desc) == 'e') {
              skipping = false;
            } else {
              ItemPointerSet(&skip_to, block, ItemPointerGetOffsetNumber(&tuple->t_self) + 1);
            }
          }
          (void)key_of(segment, tuple, buffer);
          return !full();
        });
      }
      if (full() || !left) break;
      segment = (segment + 1) % segments;
      ItemPointerSet(&at, 0, FirstOffsetNumber);
    }
    if (ItemPointerCompare(&skip_to, &lane.cursor) > 0) lane.cursor = skip_to;
    LWLockRelease(lane.claim_lock);
    for (Relation rel : rels) table_close(rel, NoLock);
  });
  return found;
}

std::vector<FairKeyStat> BusiestFairKeys(const Place& place, int max_keys) {
  std::vector<FairKeyStat> out;
  if (shared == nullptr || max_keys <= 0 || shared->fair_count == 0) return out;
  const CallPin pin{LaneOf(place, true, false)};
  if (pin.index < 0) return out;
  Lane& lane = shared->lanes[pin.index];
  const int segments = static_cast<int>(place.leaves.size());
  // Room made before the lock: nothing allocated under it.
  std::vector<core::FairOrder::KeyView> views(static_cast<size_t>(shared->fair_sizes.keys));
  int32 count = 0;
  int64 cursor_lap = 0;
  Guard([&] {
    LWLockAcquire(lane.claim_lock, LW_SHARED);
    if (const core::FairOrder* fair = FairOf(lane)) {
      count = fair->Keys(views.data(), static_cast<int32>(views.size()));
      cursor_lap = lane.cursor_lap;
    }
    LWLockRelease(lane.claim_lock);
  });
  views.resize(static_cast<size_t>(count));
  std::sort(views.begin(), views.end(), [](const auto& a, const auto& b) {
    return a.served != b.served ? a.served > b.served : a.filed > b.filed;
  });
  std::vector<Relation> rels(static_cast<size_t>(segments), nullptr);
  // Filled inside Guard, made strings after it (no container crosses it).
  struct Found {
    const core::FairOrder::KeyView* view;
    char* group_key;  // palloc'd; nullptr: none
    TimestampTz run_at;
    int64 row;  // a key with rows only: its next row (group key not read here)
  };
  std::vector<Found> found;
  found.reserve(static_cast<size_t>(max_keys));
  Guard([&] {
    for (int k = 0; k < segments; ++k) rels[k] = table_open(place.leaves[k], AccessShareLock);
    for (const core::FairOrder::KeyView& view : views) {
      if (static_cast<int>(found.size()) >= max_keys) break;
      if (!view.has_place) {
        if (view.row != 0) found.push_back(Found{&view, nullptr, 0, view.row});
        continue;
      }
      const FairAt at = FairAtOf(view.at);
      // Only places the lane could still hold (a segment is reused once
      // its jobs are closed): else the key is left out.
      if (at.lap > cursor_lap || at.lap <= cursor_lap - segments || at.offset < FirstOffsetNumber) {
        continue;
      }
      const int segment = static_cast<int>(at.lap % segments);
      if (at.block >= RelationGetNumberOfBlocks(rels[segment])) continue;
      ItemPointerData tid;
      ItemPointerSet(&tid, at.block, at.offset);
      VisitRow(rels[segment], tid, [&](HeapTupleData* tuple, Buffer) {
        TupleDesc desc = RelationGetDescr(rels[segment]);
        if (KindOf(tuple, desc) != 'e' || FairKeyOf(tuple, desc) != view.key) return;
        const Datum key = GroupKeyOf(tuple, desc);
        bool is_null;
        found.push_back(Found{&view, key == 0 ? nullptr : TextDatumGetCString(key),
                              DatumGetTimestampTz(heap_getattr(tuple, kRunAt, desc, &is_null)), 0});
      });
    }
    for (Relation rel : rels) table_close(rel, NoLock);
  });
  // Their running jobs: one walk of the lease map (this lane's leases).
  std::vector<int32> running(found.size(), 0);
  if (!found.empty() && AnyLeases()) {
    Guard([&] {
      for (int i = 0; i < kLeasePartitions; ++i) LWLockAcquire(&lease_locks[i].lock, LW_SHARED);
      HASH_SEQ_STATUS scan;
      hash_seq_init(&scan, leases);
      while (LeaseSlot* slot = static_cast<LeaseSlot*>(hash_seq_search(&scan))) {
        const Lease& lease = slot->lease;
        if (slot->key.database != static_cast<int64>(MyDatabaseId) || lease.lane != pin.index ||
            lease.fair_key == 0) {
          continue;
        }
        for (size_t k = 0; k < found.size(); ++k) {
          if (found[k].view->key == lease.fair_key) ++running[k];
        }
      }
      for (int i = 0; i < kLeasePartitions; ++i) LWLockRelease(&lease_locks[i].lock);
    });
  }
  out.reserve(found.size());
  for (size_t k = 0; k < found.size(); ++k) {
    const Found& f = found[k];
    out.push_back(FairKeyStat{f.group_key == nullptr ? std::string() : std::string(f.group_key),
                              f.view->weight, f.view->filed, f.view->skipping, f.view->served,
                              running[k], f.run_at, f.row});
  }
  return out;
}

bool RowsWanted(const Place& place, bool due, Bound* from, bool* has_from) {
  if (shared == nullptr) return false;
  const CallPin pin{LaneOf(place, true, false)};
  if (pin.index < 0) return false;
  Lane& lane = shared->lanes[pin.index];
  // Nothing due and no key named: nothing to do (a look without the lock,
  // the common case of a fair queue whose jobs are all on its ring).
  if (!due && !lane.fair_rows_named) return false;
  *has_from = false;
  return Guard([&] {
    LWLockAcquire(lane.claim_lock, LW_EXCLUSIVE);
    core::FairOrder* fair = FairOf(lane);
    bool scan = false;
    if (fair != nullptr && !due) {
      // No row due: the keys the last scan named let go (their slots).
      fair->BeginRows();
      fair->EndRows();
      lane.fair_rows_named = false;
    } else if (fair != nullptr) {
      ++lane.fair_rows_asked;
      scan = (fair->RowsFiled() == 0 || fair->RowsRanDry() ||
              lane.fair_ring_claims >= fair->KeysInUse()) &&
             64 * lane.fair_rows_asked >= lane.fair_rows_read;
      if (scan) {
        *from = lane.fair_rows_from;
        *has_from = lane.fair_rows_cut;
        lane.fair_rows_asked = 0;  // another claim meanwhile waits for this scan's filing
      }
    }
    LWLockRelease(lane.claim_lock);
    return scan;
  });
}

void FileRows(const Place& place, const std::vector<DueRow>& rows, bool from_first,
              const Bound* cut_at, int64 read) {
  if (shared == nullptr) return;
  const CallPin pin{LaneOf(place, true, false)};
  if (pin.index < 0) return;
  Lane& lane = shared->lanes[pin.index];
  // The keys hashed before the lock (detoasting may raise).
  std::vector<uint64> keys;
  keys.reserve(rows.size());
  for (const DueRow& row : rows) {
    if (row.group_key == 0) {
      keys.push_back(0);
      continue;
    }
    keys.push_back(Guard([&] {
      text* value = DatumGetTextPP(row.group_key);
      return FairKeyOfBytes(VARDATA_ANY(value), VARSIZE_ANY_EXHDR(value));
    }));
  }
  Guard([&] {
    LWLockAcquire(lane.claim_lock, LW_EXCLUSIVE);
    core::FairOrder* fair = FairOf(lane);
    if (fair != nullptr) {
      fair->BeginRows(from_first);
      for (size_t i = 0; i < rows.size(); ++i) {
        (void)fair->FileRow(keys[i], WeightOf(place, keys[i]), rows[i].id);
      }
      fair->EndRows(from_first && cut_at == nullptr);
      lane.fair_rows_named = fair->RowsNamed();
      lane.fair_ring_claims = 0;
      lane.fair_rows_read = read;
      lane.fair_rows_asked = 0;
      lane.fair_rows_cut = cut_at != nullptr;
      if (cut_at != nullptr) lane.fair_rows_from = *cut_at;
    }
    LWLockRelease(lane.claim_lock);
  });
}

Pending CountPending(const Place& place, int64 limit) {
  Pending out;
  if (shared == nullptr) return out;
  const CallPin pin{LaneOf(place, true, false)};
  if (pin.index < 0) {
    out.no_lane = true;
    return out;
  }
  Lane& lane = shared->lanes[pin.index];
  const int segments = static_cast<int>(place.leaves.size());
  // The lane's state, copied under its claim lock (shared): the walk below
  // holds no lock a claim waits for, and may count an entry a claim takes
  // meanwhile (monitoring's count, not a claim's).
  std::vector<Offer> returned;
  std::vector<Passed> passed;
  int cursor_segment = 0;
  ItemPointerData cursor;
  int insert_segment = 0;
  int cancelled = 0;
  int64 fair_held = 0;  // a fair order's offers and skipped entries (ADR 0029)
  // Room made before the lock (and outside Guard, whose frame must not see
  // an exception): the copies below allocate nothing.
  returned.reserve(kReturnedMax);
  passed.reserve(kPassedMax);
  Guard([&] {
    LWLockAcquire(lane.claim_lock, LW_SHARED);
    returned.assign(lane.returned, lane.returned + lane.returned_count);
    passed.assign(lane.passed, lane.passed + lane.passed_count);
    cursor_segment = lane.cursor_segment;
    cursor = lane.cursor;
    insert_segment = lane.insert_segment;
    cancelled = lane.cancelled_count;
    if (const core::FairOrder* fair = FairOf(lane)) {
      fair_held = fair->FiledCount() + std::max<int64>(lane.fair_skipped, 0);
    }
    LWLockRelease(lane.claim_lock);
  });
  // Taken by claims not yet committed: pending still to every other
  // session, as a table job whose claim has not committed (their leases
  // count as running once it has).
  out.count = pg_atomic_read_u32(&lane.reserved) + fair_held;
  std::vector<Relation> rels(static_cast<size_t>(segments), nullptr);
  Guard([&] {
    for (int k = 0; k < segments; ++k) rels[k] = table_open(place.leaves[k], AccessShareLock);
    // A committed entry's run_at, or false if the row is not one.
    auto entry_at = [&](int segment, HeapTupleData* tuple, Buffer buffer, TimestampTz* run_at) {
      TupleDesc desc = RelationGetDescr(rels[segment]);
      if (Look(tuple->t_data, buffer) != Seen::kCommitted || KindOf(tuple, desc) != 'e') {
        return false;
      }
      bool is_null;
      *run_at = DatumGetTimestampTz(heap_getattr(tuple, kRunAt, desc, &is_null));
      return true;
    };
    auto count = [&](TimestampTz run_at) {
      ++out.count;
      out.oldest = std::min(out.oldest, run_at);
    };
    auto look_at = [&](int segment, ItemPointerData tid) {
      VisitRow(rels[segment], tid, [&](HeapTupleData* tuple, Buffer buffer) {
        TimestampTz run_at;
        if (entry_at(segment, tuple, buffer, &run_at)) count(run_at);
      });
    };
    // The given-back entries: counted without a read past the limit.
    for (const Offer& offer : returned) {
      if (out.count >= limit) {
        ++out.count;
        continue;
      }
      look_at(offer.segment, offer.tid);
    }
    // Passed by the cursor while in progress, and committed since.
    for (const Passed& entry : passed) {
      if (out.count < limit && !TransactionIdIsInProgress(entry.xid) &&
          TransactionIdDidCommit(entry.xid)) {
        look_at(entry.segment, entry.tid);
      }
    }
    // From the cursor on, through the segments entries went to since.
    int segment = cursor_segment;
    ItemPointerData at = cursor;
    const int64 before_walk = out.count;
    double blocks_read = 0;
    double blocks_left = 0;
    for (int k = 0; k < segments; ++k) {
      const BlockNumber blocks = RelationGetNumberOfBlocks(rels[segment]);
      BlockNumber block = ItemPointerGetBlockNumber(&at);
      for (; out.count < limit && block < blocks; ++block) {
        const OffsetNumber first = block == ItemPointerGetBlockNumber(&at)
                                       ? ItemPointerGetOffsetNumber(&at)
                                       : FirstOffsetNumber;
        VisitBlock(rels[segment], block, first, [&](HeapTupleData* tuple, Buffer buffer) {
          TimestampTz run_at;
          if (entry_at(segment, tuple, buffer, &run_at)) count(run_at);
          return true;  // a block is counted whole
        });
        blocks_read += 1;
      }
      if (block < blocks) blocks_left += blocks - block;
      if (segment == insert_segment) break;
      segment = (segment + 1) % segments;
      ItemPointerSet(&at, 0, FirstOffsetNumber);
    }
    for (Relation rel : rels) table_close(rel, NoLock);
    // Cut: the blocks left hold entries as the ones read did.
    if (blocks_left > 0) {
      out.cut = true;
      if (blocks_read > 0) {
        const double walked = static_cast<double>(out.count - before_walk);
        out.count += static_cast<int64>(walked * blocks_left / blocks_read);
      }
    }
  });
  // Cancelled before the cursor reached them (tombstones' notes).
  out.count = std::max<int64>(0, out.count - cancelled);
  return out;
}

namespace {

// This database's running ring jobs' leases (held, their close not
// committed), copied under the map's locks: one walk of the map. Room is
// made first, so that nothing allocates while the locks are held, and the
// walk runs in Guard (a PostgreSQL error there is rethrown after it; the
// abort lets go of the locks).
std::vector<std::pair<int64, Lease>> RunningLeases() {
  std::vector<std::pair<int64, Lease>> held;
  if (shared == nullptr || !AnyLeases()) return held;
  held.reserve(static_cast<size_t>(pg_atomic_read_u32(&shared->leases)) + 64);
  Guard([&] {
    for (int i = 0; i < kLeasePartitions; ++i) LWLockAcquire(&lease_locks[i].lock, LW_SHARED);
    HASH_SEQ_STATUS scan;
    hash_seq_init(&scan, leases);
    while (LeaseSlot* slot = static_cast<LeaseSlot*>(hash_seq_search(&scan))) {
      const Lease& lease = slot->lease;
      if (slot->key.database != static_cast<int64>(MyDatabaseId) || !Held(lease)) continue;
      if (TransactionIdIsValid(lease.closer_xid) && CloserOf(lease) == Closer::kCommitted) continue;
      if (held.size() == held.capacity()) {
        hash_seq_term(&scan);
        break;
      }
      held.emplace_back(slot->key.id, lease);
    }
    for (int i = 0; i < kLeasePartitions; ++i) LWLockRelease(&lease_locks[i].lock);
  });
  return held;
}

}  // namespace

std::vector<std::pair<int32, Running>> CountRunning(TimestampTz now) {
  std::unordered_map<int32, Running> by_queue;
  for (const auto& [id, lease] : RunningLeases()) {
    Running& counted = by_queue[lease.queue_id];
    ++counted.running;
    if (lease.lease_until < now) ++counted.expired;
  }
  return {by_queue.begin(), by_queue.end()};
}

std::vector<RunningJob> RunningJobs(const std::function<bool(int32)>& of_queue) {
  std::vector<RunningJob> out;
  const std::vector<std::pair<int64, Lease>> held = RunningLeases();
  out.reserve(held.size());
  for (const auto& [id, lease] : held) {
    if (of_queue(lease.queue_id)) out.push_back(RunningJob{id, lease, 0, 0});
  }
  // Each entry's columns, read as the claim left it: a segment gone (its
  // queue dropped) or cut short (the job ended and its segment was
  // truncated since the walk) drops the job, which runs no more.
  std::sort(out.begin(), out.end(), [](const RunningJob& a, const RunningJob& b) {
    return a.lease.entry_relid < b.lease.entry_relid ||
           (a.lease.entry_relid == b.lease.entry_relid && a.id < b.id);
  });
  size_t kept = 0;
  Guard([&] {
    Relation rel = nullptr;
    BlockNumber blocks = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      RunningJob& job = out[i];
      if (rel == nullptr || RelationGetRelid(rel) != job.lease.entry_relid) {
        if (rel != nullptr) table_close(rel, AccessShareLock);
        rel = try_table_open(job.lease.entry_relid, AccessShareLock);
        blocks = rel == nullptr ? 0 : RelationGetNumberOfBlocks(rel);
      }
      if (rel == nullptr || ItemPointerGetBlockNumber(&job.lease.entry) >= blocks) continue;
      VisitRow(rel, job.lease.entry, [&](HeapTupleData* tuple, Buffer buffer) {
        TupleDesc desc = RelationGetDescr(rel);
        const char kind = KindOf(tuple, desc);
        if (Look(tuple->t_data, buffer) != Seen::kCommitted || (kind != 'e' && kind != 'a') ||
            IdOf(tuple, desc) != job.id) {
          return;
        }
        bool is_null;
        job.max_attempts = DatumGetInt32(heap_getattr(tuple, kMaxAttempts, desc, &is_null));
        job.enqueued_at = DatumGetTimestampTz(heap_getattr(tuple, kEnqueuedAt, desc, &is_null));
        out[kept++] = job;
      });
    }
    if (rel != nullptr) table_close(rel, AccessShareLock);
  });
  out.resize(kept);
  return out;
}

TombstoneOutcome Tombstone(const Place& place, int64 id, int segment, ItemPointerData entry,
                           int32 attempt, TransactionId* wait_for) {
  const CallPin pin{LaneOf(place)};
  const int index = pin.index;
  Keep(index);  // its note is undone, or dropped, at the transaction's end
  Lane& lane = shared->lanes[index];
  const int segments = static_cast<int>(place.leaves.size());
  ReserveUndo(1);
  const TransactionId me = Guard([] { return GetCurrentTransactionId(); });
  const Offer offer{entry, attempt, static_cast<int16>(segment)};
  // Its fair key: behind the cursor of a fair lane it may be an offer, or
  // lie past its key's mark (ADR 0029).
  const uint64 key = Guard([&] {
    uint64 of = 0;
    Relation rel = table_open(place.leaves[segment], AccessShareLock);
    VisitRow(rel, entry,
             [&](HeapTupleData* tuple, Buffer) { of = FairKeyOf(tuple, RelationGetDescr(rel)); });
    table_close(rel, NoLock);
    return of;
  });
  enum { kUndecided, kHandedOut, kTakenBack, kNoted, kFull, kAlready, kWait } outcome = kUndecided;
  bool noted = false;
  // Under the claim lock, and inside the guard: the transaction status
  // looks below may raise (the lock is then released by the abort).
  Guard([&] {
    LWLockAcquire(lane.claim_lock, LW_EXCLUSIVE);
    // Another cancel of the entry: done (committed, or this transaction's),
    // or to be waited for (in progress). One that aborted is undone by its
    // own backend (its note goes): not in the way.
    for (int i = 0; i < lane.cancelled_count && outcome == kUndecided; ++i) {
      const Tomb& tomb = lane.cancelled[i];
      if (!SameEntry(tomb, offer)) continue;
      if (tomb.xid == me) {
        outcome = kAlready;
      } else if (TransactionIdIsInProgress(tomb.xid)) {
        outcome = kWait;
        *wait_for = tomb.xid;
      } else if (TransactionIdDidCommit(tomb.xid)) {
        outcome = kAlready;
      }
    }
    UndoKind kind = UndoKind::kUncancel;
    // Given back (a claim rolled back, a lease ended): out of the list.
    for (int i = 0; i < lane.returned_count && outcome == kUndecided; ++i) {
      if (!SameEntry(lane.returned[i], offer)) continue;
      memmove(lane.returned + i, lane.returned + i + 1,
              sizeof(Offer) * static_cast<size_t>(lane.returned_count - i - 1));
      --lane.returned_count;
      outcome = kTakenBack;
      kind = UndoKind::kUntake;
    }
    if (outcome == kUndecided) {
      // Not handed out yet: passed in progress (now committed), or ahead of
      // the cursor (in its segment at or after it, or in a segment between it
      // and the one entries go to).
      bool waiting = false;
      for (int i = 0; i < lane.passed_count && !waiting; ++i) {
        waiting =
            lane.passed[i].segment == segment && ItemPointerEquals(&lane.passed[i].tid, &entry);
      }
      bool behind = false;
      if (!waiting && segment == lane.cursor_segment) {
        waiting = ItemPointerCompare(&entry, &lane.cursor) >= 0;
        behind = !waiting;
      } else if (!waiting) {
        const int to_entry = (segment - lane.cursor_segment + segments) % segments;
        const int to_insert = (lane.insert_segment - lane.cursor_segment + segments) % segments;
        waiting = to_entry <= to_insert;
        behind = !waiting;
      }
      outcome = waiting ? kNoted : kHandedOut;
      core::FairOrder* fair = FairOf(lane);
      if (behind && fair != nullptr) {
        // A fair lane's: an offer is taken out (given back if this rolls
        // back); past a skipping key's mark, noted for the sweep; else it
        // was handed out.
        if (lane.cancelled_count == kCancelledMax) {
          outcome = kFull;
        } else {
          switch (fair->Remove(key, FairPlaceOf(LapBehind(lane, segment, segments), entry))) {
            case core::FairFiled::kFiled:
              outcome = kTakenBack;
              kind = UndoKind::kUntake;
              break;
            case core::FairFiled::kSkipped:
              outcome = kNoted;
              break;
            default:
              break;
          }
        }
      }
    }
    if ((outcome == kNoted || outcome == kTakenBack) && lane.cancelled_count == kCancelledMax) {
      // No room for the note: an entry taken out goes back.
      if (outcome == kTakenBack) lane.returned[lane.returned_count++] = offer;
      outcome = kFull;
    }
    noted = outcome == kNoted || outcome == kTakenBack;
    if (noted) {
      lane.cancelled[lane.cancelled_count++] = Tomb{entry, static_cast<int16>(segment), me};
      Lease lease{};
      lease.queue_id = place.queue_id;
      lease.ring_id = place.ring_id;
      Undo note{
          GetCurrentSubTransactionId(), kind, LeaseKey{MyDatabaseId, id}, lease, index, offer};
      note.xid = me;
      undo->push_back(note);  // room reserved above: nothing thrown under the lock
      // Its slot in the given-back list is kept for its rollback.
      if (kind == UndoKind::kUntake) pg_atomic_fetch_add_u32(&lane.reserved, 1);
    }
    LWLockRelease(lane.claim_lock);
  });
  if (outcome == kFull) {
    Raise(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED, "too many cancelled jobs wait for the claim cursor",
          "The queue's lane holds " + std::to_string(kCancelledMax) +
              " cancelled jobs the cursor has not reached yet.",
          "Cancel again once claims have moved on.");
  }
  if (outcome == kWait) return TombstoneOutcome::kWait;
  return noted ? TombstoneOutcome::kTombstoned : TombstoneOutcome::kNotPending;
}

bool MayTruncate(const Place& place, int segment) {
  if (shared == nullptr) return false;
  // Built here if the maintenance is the queue's first user since the start
  // (a ring that finds no lane free is kept until one is).
  const CallPin pin{LaneOf(place, true)};
  const int index = pin.index;
  if (index < 0) return false;
  Lane& lane = shared->lanes[index];
  bool may = true;
  Guard([&] {
    LWLockAcquire(lane.claim_lock, LW_SHARED);
    for (int i = 0; i < lane.returned_count && may; ++i) {
      may = lane.returned[i].segment != segment;
    }
    // A passed entry whose inserter aborted is forgotten by the next claim.
    for (int i = 0; i < lane.passed_count && may; ++i) {
      const Passed& passed = lane.passed[i];
      may = passed.segment != segment ||
            (!TransactionIdIsInProgress(passed.xid) && !TransactionIdDidCommit(passed.xid));
    }
    // A fair order's places (offers, skipping keys' marks) from the least
    // of them to the cursor: a segment among them is read again by a sweep
    // (whose marks may lie past entries that are all closed).
    if (const core::FairOrder* fair = FairOf(lane); may && fair != nullptr) {
      if (const std::optional<core::FairPlace> least = fair->Least()) {
        const int segments = static_cast<int>(place.leaves.size());
        may = LapBehind(lane, segment, segments) < FairAtOf(*least).lap;
      }
    }
    LWLockRelease(lane.claim_lock);
  });
  if (!may || !AnyLeases()) return may;
  const Oid relid = place.leaves[segment];
  Guard([&] {  // CloserOf asks the commit log, which may raise (as Expired's walk)
    for (int i = 0; i < kLeasePartitions; ++i) LWLockAcquire(&lease_locks[i].lock, LW_SHARED);
    HASH_SEQ_STATUS scan;
    hash_seq_init(&scan, leases);
    while (LeaseSlot* slot = static_cast<LeaseSlot*>(hash_seq_search(&scan))) {
      // A lease closed by this transaction or by one that committed holds
      // nothing (AllClosed reads its closure; a rollback of this one takes
      // the truncation back with it).
      if (slot->key.database == static_cast<int64>(MyDatabaseId) &&
          slot->lease.entry_relid == relid && CloserOf(slot->lease) != Closer::kOurs &&
          CloserOf(slot->lease) != Closer::kCommitted) {
        may = false;
        hash_seq_term(&scan);
        break;
      }
    }
    for (int i = 0; i < kLeasePartitions; ++i) LWLockRelease(&lease_locks[i].lock);
  });
  return may;
}

bool AllClosed(Oid relid) {
  return Guard([&] {
    Relation rel = table_open(relid, AccessShareLock);
    TupleDesc desc = RelationGetDescr(rel);
    HASHCTL info;
    memset(&info, 0, sizeof(info));
    info.keysize = sizeof(int64);
    info.entrysize = sizeof(int64) + sizeof(int32);
    info.hcxt = CurrentMemoryContext;
    HTAB* open =
        hash_create("pgq ring segment entries", 1024, &info, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
    bool in_progress = false;
    const BlockNumber blocks = RelationGetNumberOfBlocks(rel);
    // Per id, entries (e, and a claimed entry a) count +1 and closures -1: closed when none is left
    // above 0 (a closure may lie before its entry's page: no order here).
    for (BlockNumber block = 0; block < blocks && !in_progress; ++block) {
      Buffer buffer = ReadBuffer(rel, block);
      LockBuffer(buffer, BUFFER_LOCK_SHARE);
      Page page = BufferGetPage(buffer);
      const OffsetNumber max = PageGetMaxOffsetNumber(page);
      for (OffsetNumber offset = FirstOffsetNumber; offset <= max; ++offset) {
        HeapTupleData tuple;
        if (!RowAt(page, block, offset, relid, &tuple)) continue;
        const Seen seen = Look(tuple.t_data, buffer);
        if (seen == Seen::kInProgress) {
          in_progress = true;  // not under the caller's exclusive lock
          break;
        }
        if (seen == Seen::kGone) continue;
        const char kind = KindOf(&tuple, desc);
        if (kind != 'e' && kind != 'a' && kind != 'c') continue;
        const int64 id = IdOf(&tuple, desc);
        bool found;
        char* slot = static_cast<char*>(hash_search(open, &id, HASH_ENTER, &found));
        int32* balance = reinterpret_cast<int32*>(slot + sizeof(int64));
        if (!found) *balance = 0;
        *balance += kind == 'c' ? -1 : 1;
      }
      UnlockReleaseBuffer(buffer);
    }
    bool closed = !in_progress;
    HASH_SEQ_STATUS scan;
    hash_seq_init(&scan, open);
    while (char* slot = static_cast<char*>(hash_seq_search(&scan))) {
      if (*reinterpret_cast<int32*>(slot + sizeof(int64)) > 0) {
        closed = false;
        hash_seq_term(&scan);
        break;
      }
    }
    hash_destroy(open);
    table_close(rel, NoLock);
    return closed;
  });
}

bool LetGo(const Place& place, int segment) {
  if (shared == nullptr) return false;
  const CallPin pin{LaneOf(place, true)};
  const int index = pin.index;
  if (index < 0) return false;
  Lane& lane = shared->lanes[index];
  const int segments = static_cast<int>(place.leaves.size());
  bool let_go = false;
  Guard([&] {
    LWLockAcquire(lane.insert_lock, LW_EXCLUSIVE);
    LWLockAcquire(lane.claim_lock, LW_EXCLUSIVE);
  });
  // The newest turn (the caller holds the ledger): a backend that read the
  // ledger before it places its entries where the lane says, never here.
  FollowTurn(lane, place);
  if (lane.insert_segment != segment) {
    // Every entry of the segment is closed: the cursor has nothing left
    // in it (and must not stay in it: entries placed after a later turn
    // onto it would lie behind the cursor).
    if (lane.cursor_segment == segment) NextCursorSegment(lane, segments);
    // What is left of the segment in the lists is of aborted inserters, and
    // tombstones of entries that are closed (a later turn onto the emptied
    // segment must not find them on its new rows).
    int kept = 0;
    for (int i = 0; i < lane.passed_count; ++i) {
      if (lane.passed[i].segment != segment) lane.passed[kept++] = lane.passed[i];
    }
    lane.passed_count = kept;
    kept = 0;
    for (int i = 0; i < lane.cancelled_count; ++i) {
      if (lane.cancelled[i].segment != segment) lane.cancelled[kept++] = lane.cancelled[i];
    }
    lane.cancelled_count = kept;
    let_go = true;
  }
  LWLockRelease(lane.claim_lock);
  LWLockRelease(lane.insert_lock);
  return let_go;
}

namespace {

// Frees the lanes `match(database, ring_id)` says, with their leases and
// the notes of Shared::noted it says. Only for lanes nobody
// uses: their queue or database is gone, or its tables are locked by the
// statement that drops them. Neither throws nor raises (the utility hook
// calls it outside any boundary): no allocation, only lock calls.
template <typename Match>
void FreeLanes(Match&& match) {
  bool freed[kMaxLanes] = {};
  {
    LWLockAcquire(shared->lanes_lock, LW_EXCLUSIVE);
    bool any = false;
    for (int i = 0; i < shared->lane_count; ++i) {
      const Lane& lane = shared->lanes[i];
      if (lane.database != InvalidOid && match(lane.database, lane.ring_id)) {
        freed[i] = any = true;
      }
    }
    for (int i = 0; i < shared->noted_count; ++i) {
      const Shared::Noted& n = shared->noted[i];
      if (match(n.database, n.ring_id)) shared->noted[i--] = shared->noted[--shared->noted_count];
    }
    if (any) {
      for (int i = 0; i < kLeasePartitions; ++i) LWLockAcquire(&lease_locks[i].lock, LW_EXCLUSIVE);
      HASH_SEQ_STATUS scan;
      hash_seq_init(&scan, leases);
      while (LeaseSlot* slot = static_cast<LeaseSlot*>(hash_seq_search(&scan))) {
        if (!freed[slot->lease.lane]) continue;
        // Removing the element just returned is allowed during the scan.
        bool found;
        const LeaseKey key = slot->key;
        hash_search(leases, &key, HASH_REMOVE, &found);
        pg_atomic_fetch_sub_u32(&shared->leases, 1);
      }
      for (int i = 0; i < kLeasePartitions; ++i) LWLockRelease(&lease_locks[i].lock);
      for (int i = 0; i < shared->lane_count; ++i) {
        if (!freed[i]) continue;
        Lane& lane = shared->lanes[i];
        lane.database = InvalidOid;
        lane.built = false;
        DetachFair(lane);
        pg_atomic_write_u32(&lane.leases, 0);
        pg_atomic_write_u32(&lane.closing, 0);
        pg_atomic_write_u32(&lane.dependents, 0);
        pg_atomic_write_u32(&lane.reserved, 0);
      }
      pg_atomic_fetch_add_u32(&shared->lanes_epoch, 1);
    }
    LWLockRelease(shared->lanes_lock);
  }
}

}  // namespace

void Forget(int32 ring_id) {
  if (shared == nullptr) return;
  // From a frame of ours (store's drop): guarded. ForgetDatabase is called
  // from the utility hook, whose frame holds no C++ object.
  Guard([&] {
    FreeLanes(
        [&](Oid database, int32 ring) { return database == MyDatabaseId && ring == ring_id; });
  });
}

void ForgetDatabase(Oid database) {
  if (shared == nullptr) return;
  FreeLanes([&](Oid of, int32) { return of == database; });
}

}  // namespace pgq::pg::job_ring
