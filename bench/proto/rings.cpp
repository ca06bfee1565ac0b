// Issue 33, step 1: a prototype of plain jobs on an append-only ring, built
// only with `make RINGS_PROTO=1` and measured by bench/rings_proto.sh. It
// answers one question before anything is migrated: what a claim and a
// completion cost when nothing is updated in place (docs/design/
// queues-on-rings.md). It is not the engine: one ring for every queue, no
// segments turned (a ring's turn is one TRUNCATE a period, nothing per job),
// no rights, caps, groups, rate limits, wait or lease expiry, and no rebuild
// of shared memory after a restart. What it does have is every cost those
// leave on the hot path: an id from a sequence, an entry appended per job, a
// receipt appended per claim, a closure appended per completion, the fence
// checked against the live leases, and the give-back of an aborted claim.
//
// The three tables (bench/sql/rings_proto.sql) have no index:
//   entries  (id, queue_id, priority, max_attempts, run_at, enqueued_at, payload)
//   receipts (id, attempt, lease_until, claimed_at, entry tid)
//   closures (id, attempt, outcome, at)
//
// INVARIANT (claim order is heap order): every entry is appended under the
// ring's insert lock, on the ring's insert block or on a new last block, so
// entries lie in the heap in the order they were appended, and a claim
// cursor (a TID) that has passed a place never needs to look before it
// again. An entry whose inserter was still running when the cursor passed
// it is kept in the passed set and looked at again by every claim until it
// commits (handed out) or aborts (forgotten): a late commit is never skipped.
//
// INVARIANT (one holder): an entry is handed out under the claim lock and
// the cursor moves past it at once; it comes back only through the
// give-back of the claiming transaction's abort. Its lease lives in the
// shared lease map (id -> attempt, receipt); a completion takes the lease
// out if its attempt matches (the fence) and puts it back if it aborts.
#include <vector>

#include "pg/boundary.h"
#include "pg/pg.h"

extern "C" {
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "commands/sequence.h"
#include "common/hashfn.h"
#include "executor/tuptable.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "storage/bufmgr.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/timestamp.h"
}

namespace {

constexpr int kPassedMax = 1024;
constexpr int kReturnedMax = 8192;
constexpr long kLeasesMax = 1L << 20;
constexpr int kLeasePartitions = 16;
constexpr const char* kTranche = "pgq_ring_proto";

struct Passed {
  TransactionId xid;
  ItemPointerData tid;
};

struct Offer {  // an entry to hand out, and the attempt it would be
  ItemPointerData tid;
  int32 attempt;
};

struct Ring {
  LWLock* insert_lock;
  LWLock* claim_lock;
  BlockNumber insert_block;  // InvalidBlockNumber: the last block of the table
  ItemPointerData cursor;    // the next place a claim looks at
  int passed_count;
  Passed passed[kPassedMax];
  int returned_count;
  Offer returned[kReturnedMax];
};

struct Lease {
  int64 id;  // key
  int32 attempt;
  ItemPointerData entry;
  TimestampTz lease_until;
};

Ring* ring = nullptr;
HTAB* leases = nullptr;
LWLockPadded* lease_locks = nullptr;

shmem_request_hook_type prev_request = nullptr;
shmem_startup_hook_type prev_startup = nullptr;

void Request() {
  if (prev_request != nullptr) prev_request();
  RequestAddinShmemSpace(MAXALIGN(sizeof(Ring)) + hash_estimate_size(kLeasesMax, sizeof(Lease)));
  RequestNamedLWLockTranche(kTranche, 2 + kLeasePartitions);
}

void Startup() {
  if (prev_startup != nullptr) prev_startup();
  LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
  bool found = false;
  ring = static_cast<Ring*>(ShmemInitStruct("pgq ring proto", sizeof(Ring), &found));
  LWLockPadded* locks = GetNamedLWLockTranche(kTranche);
  if (!found) {
    memset(ring, 0, sizeof(Ring));
    ring->insert_lock = &locks[0].lock;
    ring->claim_lock = &locks[1].lock;
    ring->insert_block = InvalidBlockNumber;
    ItemPointerSet(&ring->cursor, 0, FirstOffsetNumber);
  }
  lease_locks = locks + 2;
  HASHCTL info;
  memset(&info, 0, sizeof(info));
  info.keysize = sizeof(int64);
  info.entrysize = sizeof(Lease);
  info.num_partitions = kLeasePartitions;
  leases = ShmemInitHash("pgq ring proto leases", kLeasesMax, kLeasesMax, &info,
                         HASH_ELEM | HASH_BLOBS | HASH_PARTITION);
  LWLockRelease(AddinShmemInitLock);
}

// The tables, looked up once per backend.
struct Tables {
  Oid entries, receipts, closures, ids;
};
Tables tables = {};

Oid Lookup(const char* name, bool sequence) {
  RangeVar* rv = makeRangeVar(pstrdup("pgq_ring"), pstrdup(name), -1);
  return RangeVarGetRelid(rv, NoLock, false);
}

const Tables& TablesOf() {
  if (tables.entries == InvalidOid) {
    tables.entries = Lookup("entries", false);
    tables.receipts = Lookup("receipts", false);
    tables.closures = Lookup("closures", false);
    tables.ids = Lookup("ids", true);
  }
  return tables;
}

int32 QueueId(text* name) {
  // A prototype: the queue's id is not looked up (every queue shares one
  // ring); a name's hash stands in so that entries carry a queue column.
  return static_cast<int32>(
      DatumGetUInt32(
          hash_any(reinterpret_cast<unsigned char*>(VARDATA_ANY(name)), VARSIZE_ANY_EXHDR(name))) &
      0x7fffffff);
}

// What this transaction must undo if it aborts: entries it was handed (they
// go back to the ring) and leases it took out by completing (they come back).
std::vector<Offer> claimed_here;
std::vector<int64> claimed_ids;
std::vector<Lease> completed_here;
bool callback_registered = false;

void AtEnd(XactEvent event, void*) {
  if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT) {
    if (!claimed_here.empty()) {
      LWLockAcquire(ring->claim_lock, LW_EXCLUSIVE);
      for (const Offer& offer : claimed_here) {
        if (ring->returned_count < kReturnedMax) ring->returned[ring->returned_count++] = offer;
      }
      LWLockRelease(ring->claim_lock);
    }
    for (const int64 id : claimed_ids) {
      const uint32 hash = get_hash_value(leases, &id);
      LWLock* lock = &lease_locks[hash % kLeasePartitions].lock;
      LWLockAcquire(lock, LW_EXCLUSIVE);
      bool found;
      hash_search_with_hash_value(leases, &id, hash, HASH_REMOVE, &found);
      LWLockRelease(lock);
    }
    for (const Lease& lease : completed_here) {
      const uint32 hash = get_hash_value(leases, &lease.id);
      LWLock* lock = &lease_locks[hash % kLeasePartitions].lock;
      LWLockAcquire(lock, LW_EXCLUSIVE);
      bool found;
      Lease* back = static_cast<Lease*>(
          hash_search_with_hash_value(leases, &lease.id, hash, HASH_ENTER_NULL, &found));
      if (back != nullptr) *back = lease;
      LWLockRelease(lock);
    }
  }
  if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT ||
      event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT ||
      event == XACT_EVENT_PREPARE) {
    claimed_here.clear();
    claimed_ids.clear();
    completed_here.clear();
  }
}

void Prepare() {
  if (ring == nullptr) {
    pgq::pg::Raise(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                   "the ring prototype needs pgq_cpp in shared_preload_libraries");
  }
  if (!callback_registered) {
    pgq::pg::Guard([] { RegisterXactCallback(AtEnd, nullptr); });
    callback_registered = true;
  }
}

// A copy of a relation's descriptor that is not reference-counted: a slot
// made on the relation's own pins it in the resource owner, one entry per
// slot, and a batch of 100 identical entries makes the owner's array a slow
// hash (measured: 40 us a job at n = 100).
TupleDesc Unpinned(TupleDesc desc) { return CreateTupleDescCopy(desc); }

// Appends `count` entries under the insert lock (the heap-order invariant).
void AppendEntries(Relation rel, HeapTuple* tuples, int count) {
  LWLockAcquire(ring->insert_lock, LW_EXCLUSIVE);
  if (ring->insert_block != InvalidBlockNumber)
    RelationSetTargetBlock(rel, ring->insert_block);
  else
    RelationSetTargetBlock(rel, InvalidBlockNumber);
  const CommandId cid = GetCurrentCommandId(true);
  if (count == 1) {
    heap_insert(rel, tuples[0], cid, HEAP_INSERT_SKIP_FSM, nullptr);
    ring->insert_block = ItemPointerGetBlockNumber(&tuples[0]->t_self);
  } else {
    TupleTableSlot** slots = static_cast<TupleTableSlot**>(palloc(sizeof(void*) * count));
    TupleDesc unpinned = Unpinned(RelationGetDescr(rel));
    for (int i = 0; i < count; ++i) {
      slots[i] = MakeSingleTupleTableSlot(unpinned, &TTSOpsHeapTuple);
      ExecStoreHeapTuple(tuples[i], slots[i], false);
    }
    heap_multi_insert(rel, slots, count, cid, HEAP_INSERT_SKIP_FSM, nullptr);
    ring->insert_block = ItemPointerGetBlockNumber(&slots[count - 1]->tts_tid);
    for (int i = 0; i < count; ++i) ExecDropSingleTupleTableSlot(slots[i]);
  }
  LWLockRelease(ring->insert_lock);
}

HeapTuple EntryTuple(Relation rel, int64 id, int32 queue_id, Datum payload, TimestampTz now) {
  Datum values[7] = {
      Int64GetDatum(id),        Int32GetDatum(queue_id),  Int16GetDatum(0), Int16GetDatum(25),
      TimestampTzGetDatum(now), TimestampTzGetDatum(now), payload};
  bool nulls[7] = {};
  return heap_form_tuple(RelationGetDescr(rel), values, nulls);
}

// What the claim scan found: a committed entry, one still being written, or
// one that never will be (aborted).
enum class Seen { kReady, kInProgress, kGone };

Seen Look(HeapTupleHeader tuple, Buffer buffer) {
  if (HeapTupleHeaderXminCommitted(tuple)) return Seen::kReady;
  if (HeapTupleHeaderXminInvalid(tuple)) return Seen::kGone;
  const TransactionId xmin = HeapTupleHeaderGetRawXmin(tuple);
  if (TransactionIdIsCurrentTransactionId(xmin)) return Seen::kReady;
  if (TransactionIdIsInProgress(xmin)) return Seen::kInProgress;
  if (TransactionIdDidCommit(xmin)) {
    HeapTupleSetHintBits(tuple, buffer, HEAP_XMIN_COMMITTED, xmin);
    return Seen::kReady;
  }
  HeapTupleSetHintBits(tuple, buffer, HEAP_XMIN_INVALID, InvalidTransactionId);
  return Seen::kGone;
}

// Up to `n` entries for one claimer, under the claim lock: given-back ones
// first, then passed ones that committed since, then the ring after the
// cursor. Returns the entries' tuples (copied) and their attempts.
int Offers(Relation rel, int n, HeapTuple* out, int32* attempts) {
  int got = 0;
  auto take = [&](Buffer buffer, HeapTupleHeader header, ItemId item, ItemPointerData tid,
                  int32 attempt) {
    HeapTupleData tuple;
    tuple.t_data = header;
    tuple.t_len = ItemIdGetLength(item);
    tuple.t_self = tid;
    tuple.t_tableOid = RelationGetRelid(rel);
    out[got] = heap_copytuple(&tuple);
    attempts[got] = attempt;
    claimed_here.push_back(Offer{tid, attempt});
    ++got;
  };
  auto fetch = [&](const Offer& offer) {
    Buffer buffer = ReadBuffer(rel, ItemPointerGetBlockNumber(&offer.tid));
    LockBuffer(buffer, BUFFER_LOCK_SHARE);
    Page page = BufferGetPage(buffer);
    ItemId item = PageGetItemId(page, ItemPointerGetOffsetNumber(&offer.tid));
    take(buffer, reinterpret_cast<HeapTupleHeader>(PageGetItem(page, item)), item, offer.tid,
         offer.attempt);
    UnlockReleaseBuffer(buffer);
  };

  LWLockAcquire(ring->claim_lock, LW_EXCLUSIVE);
  while (got < n && ring->returned_count > 0) fetch(ring->returned[--ring->returned_count]);
  for (int i = 0; i < ring->passed_count && got < n;) {
    const Passed passed = ring->passed[i];
    const bool running = TransactionIdIsInProgress(passed.xid);
    if (running) {
      ++i;
      continue;
    }
    if (TransactionIdDidCommit(passed.xid)) fetch(Offer{passed.tid, 1});
    ring->passed[i] = ring->passed[--ring->passed_count];
  }
  BlockNumber last = ring->insert_block;
  if (last == InvalidBlockNumber) {
    const BlockNumber blocks = RelationGetNumberOfBlocks(rel);
    last = blocks == 0 ? InvalidBlockNumber : blocks - 1;
  }
  while (got < n && last != InvalidBlockNumber &&
         ItemPointerGetBlockNumber(&ring->cursor) <= last) {
    const BlockNumber block = ItemPointerGetBlockNumber(&ring->cursor);
    Buffer buffer = ReadBuffer(rel, block);
    LockBuffer(buffer, BUFFER_LOCK_SHARE);
    Page page = BufferGetPage(buffer);
    const OffsetNumber max = PageGetMaxOffsetNumber(page);
    OffsetNumber offset = ItemPointerGetOffsetNumber(&ring->cursor);
    bool stalled = false;
    for (; offset <= max && got < n; ++offset) {
      ItemId item = PageGetItemId(page, offset);
      if (!ItemIdIsNormal(item)) continue;
      HeapTupleHeader header = reinterpret_cast<HeapTupleHeader>(PageGetItem(page, item));
      ItemPointerData tid;
      ItemPointerSet(&tid, block, offset);
      switch (Look(header, buffer)) {
        case Seen::kReady:
          take(buffer, header, item, tid, 1);
          break;
        case Seen::kInProgress:
          if (ring->passed_count == kPassedMax) {
            stalled = true;  // the cursor waits here until the set has room
            break;
          }
          ring->passed[ring->passed_count++] = Passed{HeapTupleHeaderGetRawXmin(header), tid};
          break;
        case Seen::kGone:
          break;
      }
      if (stalled) break;
    }
    UnlockReleaseBuffer(buffer);
    if (stalled || offset <= max || block == last) {
      ItemPointerSet(&ring->cursor, block, offset);
      break;
    }
    ItemPointerSet(&ring->cursor, block + 1, FirstOffsetNumber);
  }
  LWLockRelease(ring->claim_lock);
  return got;
}

void PutLease(const Lease& lease) {
  const uint32 hash = get_hash_value(leases, &lease.id);
  LWLock* lock = &lease_locks[hash % kLeasePartitions].lock;
  LWLockAcquire(lock, LW_EXCLUSIVE);
  bool found;
  Lease* slot = static_cast<Lease*>(
      hash_search_with_hash_value(leases, &lease.id, hash, HASH_ENTER_NULL, &found));
  if (slot != nullptr) *slot = lease;
  LWLockRelease(lock);
  if (slot == nullptr) {
    ereport(ERROR,
            (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("the ring prototype's lease map is full")));
  }
}

// Takes the lease of (id, attempt) out if it is the live one: the fence.
bool TakeLease(int64 id, int32 attempt) {
  const uint32 hash = get_hash_value(leases, &id);
  LWLock* lock = &lease_locks[hash % kLeasePartitions].lock;
  LWLockAcquire(lock, LW_EXCLUSIVE);
  bool found;
  Lease* slot =
      static_cast<Lease*>(hash_search_with_hash_value(leases, &id, hash, HASH_FIND, &found));
  bool ok = found && slot->attempt == attempt;
  if (ok) {
    completed_here.push_back(*slot);
    hash_search_with_hash_value(leases, &id, hash, HASH_REMOVE, &found);
  }
  LWLockRelease(lock);
  return ok;
}

void AppendClosures(const int64* ids, const int32* attempts, int count, TimestampTz now) {
  Relation rel = table_open(TablesOf().closures, RowExclusiveLock);
  TupleDesc desc = RelationGetDescr(rel);
  const CommandId cid = GetCurrentCommandId(true);
  if (count == 1) {
    Datum values[4] = {Int64GetDatum(ids[0]), Int32GetDatum(attempts[0]), CharGetDatum('c'),
                       TimestampTzGetDatum(now)};
    bool nulls[4] = {};
    heap_insert(rel, heap_form_tuple(desc, values, nulls), cid, 0, nullptr);
  } else if (count > 1) {
    TupleDesc unpinned = Unpinned(desc);
    TupleTableSlot** slots = static_cast<TupleTableSlot**>(palloc(sizeof(void*) * count));
    for (int i = 0; i < count; ++i) {
      Datum values[4] = {Int64GetDatum(ids[i]), Int32GetDatum(attempts[i]), CharGetDatum('c'),
                         TimestampTzGetDatum(now)};
      bool nulls[4] = {};
      slots[i] = MakeSingleTupleTableSlot(unpinned, &TTSOpsHeapTuple);
      ExecStoreHeapTuple(heap_form_tuple(desc, values, nulls), slots[i], false);
    }
    heap_multi_insert(rel, slots, count, cid, 0, nullptr);
    for (int i = 0; i < count; ++i) ExecDropSingleTupleTableSlot(slots[i]);
  }
  table_close(rel, NoLock);
}

}  // namespace

namespace pgq::proto {
void RequestRingShmem() {
  prev_request = shmem_request_hook;
  shmem_request_hook = Request;
  prev_startup = shmem_startup_hook;
  shmem_startup_hook = Startup;
}
}  // namespace pgq::proto

// pgq_ring.enqueue(queue text, payload jsonb) returns bigint
PGQ_FUNCTION(pgq_ring_enqueue) {
  Prepare();
  return pgq::pg::Guard([&]() -> Datum {
    text* queue = PG_GETARG_TEXT_PP(0);
    const Datum payload = PG_GETARG_DATUM(1);
    const Tables& t = TablesOf();
    const int64 id = nextval_internal(t.ids, false);
    Relation rel = table_open(t.entries, RowExclusiveLock);
    HeapTuple tuple =
        EntryTuple(rel, id, QueueId(queue), payload, GetCurrentTransactionStartTimestamp());
    AppendEntries(rel, &tuple, 1);
    table_close(rel, NoLock);
    return Int64GetDatum(id);
  });
}

// pgq_ring.enqueue_many(queue text, payloads jsonb[]) returns setof bigint
PGQ_FUNCTION(pgq_ring_enqueue_many) {
  Prepare();
  pgq::pg::Guard([&] {
    text* queue = PG_GETARG_TEXT_PP(0);
    ArrayType* payloads = PG_GETARG_ARRAYTYPE_P(1);
    InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
    ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
    Datum* elems;
    bool* elem_nulls;
    int count;
    deconstruct_array(payloads, JSONBOID, -1, false, TYPALIGN_INT, &elems, &elem_nulls, &count);
    const Tables& t = TablesOf();
    Relation rel = table_open(t.entries, RowExclusiveLock);
    const int32 queue_id = QueueId(queue);
    const TimestampTz now = GetCurrentTransactionStartTimestamp();
    HeapTuple* tuples = static_cast<HeapTuple*>(palloc(sizeof(HeapTuple) * count));
    int64* ids = static_cast<int64*>(palloc(sizeof(int64) * count));
    for (int i = 0; i < count; ++i) {
      ids[i] = nextval_internal(t.ids, false);
      tuples[i] = EntryTuple(rel, ids[i], queue_id, elems[i], now);
    }
    if (count > 0) AppendEntries(rel, tuples, count);
    table_close(rel, NoLock);
    for (int i = 0; i < count; ++i) {
      Datum value = Int64GetDatum(ids[i]);
      bool is_null = false;
      tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, &value, &is_null);
    }
  });
  return static_cast<Datum>(0);
}

// pgq_ring.claim(queue text, n int, lease interval) returns setof (id bigint, attempt int, payload
// jsonb)
PGQ_FUNCTION(pgq_ring_claim) {
  Prepare();
  pgq::pg::Guard([&] {
    const int32 n = PG_GETARG_INT32(1);
    Interval* lease = PG_GETARG_INTERVAL_P(2);
    InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
    ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
    if (n <= 0) return;
    const Tables& t = TablesOf();
    const TimestampTz now = GetCurrentTransactionStartTimestamp();
    const TimestampTz until = DatumGetTimestampTz(DirectFunctionCall2(
        timestamptz_pl_interval, TimestampTzGetDatum(now), PointerGetDatum(lease)));
    // Claims take an xid before the scan, as a claim of pgq.jobs does: the
    // receipts are written in this transaction.
    (void)GetCurrentTransactionId();
    Relation entries = table_open(t.entries, AccessShareLock);
    HeapTuple* offered = static_cast<HeapTuple*>(palloc(sizeof(HeapTuple) * n));
    // Room made before the claim lock is taken: nothing below may throw.
    claimed_here.reserve(claimed_here.size() + n);
    claimed_ids.reserve(claimed_ids.size() + n);
    int32* attempts = static_cast<int32*>(palloc(sizeof(int32) * n));
    const int got = Offers(entries, n, offered, attempts);
    TupleDesc entry_desc = RelationGetDescr(entries);
    if (got > 0) {
      Relation receipts = table_open(t.receipts, RowExclusiveLock);
      TupleDesc desc = RelationGetDescr(receipts);
      TupleTableSlot** slots = static_cast<TupleTableSlot**>(palloc(sizeof(void*) * got));
      TupleDesc unpinned = Unpinned(desc);
      for (int i = 0; i < got; ++i) {
        bool isnull;
        const int64 id = DatumGetInt64(heap_getattr(offered[i], 1, entry_desc, &isnull));
        ItemPointerData* entry = static_cast<ItemPointerData*>(palloc(sizeof(ItemPointerData)));
        *entry = offered[i]->t_self;
        Datum values[5] = {Int64GetDatum(id), Int32GetDatum(attempts[i]),
                           TimestampTzGetDatum(until), TimestampTzGetDatum(now),
                           PointerGetDatum(entry)};
        bool nulls[5] = {};
        slots[i] = MakeSingleTupleTableSlot(unpinned, &TTSOpsHeapTuple);
        ExecStoreHeapTuple(heap_form_tuple(desc, values, nulls), slots[i], false);
        PutLease(Lease{id, attempts[i], offered[i]->t_self, until});
        claimed_ids.push_back(id);
        Datum out[3] = {Int64GetDatum(id), Int32GetDatum(attempts[i]),
                        heap_getattr(offered[i], 7, entry_desc, &isnull)};
        bool out_nulls[3] = {};
        tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, out_nulls);
      }
      const CommandId cid = GetCurrentCommandId(true);
      if (got == 1) {
        heap_insert(receipts, ExecFetchSlotHeapTuple(slots[0], false, nullptr), cid, 0, nullptr);
      } else {
        heap_multi_insert(receipts, slots, got, cid, 0, nullptr);
      }
      for (int i = 0; i < got; ++i) ExecDropSingleTupleTableSlot(slots[i]);
      table_close(receipts, NoLock);
    }
    table_close(entries, NoLock);
  });
  return static_cast<Datum>(0);
}

// pgq_ring.complete(id bigint, attempt int) returns boolean
PGQ_FUNCTION(pgq_ring_complete) {
  Prepare();
  return pgq::pg::Guard([&]() -> Datum {
    const int64 id = PG_GETARG_INT64(0);
    const int32 attempt = PG_GETARG_INT32(1);
    completed_here.reserve(completed_here.size() + 1);
    if (!TakeLease(id, attempt)) return BoolGetDatum(false);
    AppendClosures(&id, &attempt, 1, GetCurrentTransactionStartTimestamp());
    return BoolGetDatum(true);
  });
}

// pgq_ring.complete_many(ids bigint[], attempts int[]) returns integer
PGQ_FUNCTION(pgq_ring_complete_many) {
  Prepare();
  return pgq::pg::Guard([&]() -> Datum {
    ArrayType* id_array = PG_GETARG_ARRAYTYPE_P(0);
    ArrayType* attempt_array = PG_GETARG_ARRAYTYPE_P(1);
    const int count = ArrayGetNItems(ARR_NDIM(id_array), ARR_DIMS(id_array));
    if (count != ArrayGetNItems(ARR_NDIM(attempt_array), ARR_DIMS(attempt_array))) {
      ereport(ERROR, (errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
                      errmsg("ids and attempts must have the same length")));
    }
    const int64* ids = reinterpret_cast<const int64*>(ARR_DATA_PTR(id_array));
    const int32* attempts = reinterpret_cast<const int32*>(ARR_DATA_PTR(attempt_array));
    int64* done_ids = static_cast<int64*>(palloc(sizeof(int64) * (count + 1)));
    int32* done_attempts = static_cast<int32*>(palloc(sizeof(int32) * (count + 1)));
    int done = 0;
    completed_here.reserve(completed_here.size() + count);
    for (int i = 0; i < count; ++i) {
      if (TakeLease(ids[i], attempts[i])) {
        done_ids[done] = ids[i];
        done_attempts[done] = attempts[i];
        ++done;
      }
    }
    AppendClosures(done_ids, done_attempts, done, GetCurrentTransactionStartTimestamp());
    return Int32GetDatum(done);
  });
}

// pgq_ring.reset() returns void: after the bench empties the tables (TRUNCATE),
// the ring's shared state starts again at the first block.
PGQ_FUNCTION(pgq_ring_reset) {
  Prepare();
  pgq::pg::Guard([] {
    LWLockAcquire(ring->insert_lock, LW_EXCLUSIVE);
    LWLockAcquire(ring->claim_lock, LW_EXCLUSIVE);
    ring->insert_block = InvalidBlockNumber;
    ItemPointerSet(&ring->cursor, 0, FirstOffsetNumber);
    ring->passed_count = 0;
    ring->returned_count = 0;
    LWLockRelease(ring->claim_lock);
    LWLockRelease(ring->insert_lock);
    for (int i = 0; i < kLeasePartitions; ++i) LWLockAcquire(&lease_locks[i].lock, LW_EXCLUSIVE);
    HASH_SEQ_STATUS scan;
    hash_seq_init(&scan, leases);
    std::vector<int64> ids;
    while (Lease* lease = static_cast<Lease*>(hash_seq_search(&scan))) ids.push_back(lease->id);
    bool found;
    for (const int64 id : ids) hash_search(leases, &id, HASH_REMOVE, &found);
    for (int i = 0; i < kLeasePartitions; ++i) LWLockRelease(&lease_locks[i].lock);
  });
  PG_RETURN_VOID();
}
