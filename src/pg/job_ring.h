// A queue's jobs on a ring (ADR 0028, issue 33 step 2a): the rows of
// pgq.job_log_<queue> — entries, receipts, closures, each written once — and
// what shared memory keeps of them: the queue's lane (insert lock and block,
// claim cursor, passed set, given-back list) and the lease map, the fence of
// every (id, attempt). Rebuilt from the rows the first time a queue is used
// after a start; never the only copy of anything committed.
//
// INVARIANT (claim order is heap order): every entry is appended under the
// lane's insert lock, on the lane's insert block or a new last block, so a
// cursor that passed a place never needs to look before it again. It needs
// line pointers never reused: the segments are made with
// vacuum_index_cleanup = off (store/ring_jobs.cpp), so a VACUUM leaves a
// rolled-back row's line pointer dead until the segment is truncated.
// INVARIANT (one holder): an entry is handed out under the claim lock and
// the cursor moves past it at once; it comes back only through the
// given-back list (the claim rolled back).
// INVARIANT (the fence): the lease map holds one attempt per running ring
// job; a completion or extension of another attempt finds nothing.
//
// Without shared memory (not preloaded) there is no ring: queues keep their
// jobs in pgq.jobs.
#pragma once

#include <vector>

#include "pg/pg.h"

namespace pgq::pg::job_ring {

// pgq.job_log's columns (the install script's order).
enum Column : int {
  kRing = 1,  // the queue's ring id (pgq.queues.ring_id)
  kSegment,
  kKind,  // 'e' entry, 'r' receipt, 'c' closure
  kId,
  kAttempt,  // entry: attempts already spent; receipt/closure: the attempt
  kPriority,
  kMaxAttempts,
  kRunAt,
  kEnqueuedAt,
  kLeaseUntil,  // receipt
  kAt,          // receipt: claimed at; closure: closed at
  kOutcome,     // closure: 'd' done, 'm' moved to pgq.jobs
  kPayload,     // entry
  kColumns = kPayload
};

// Requests the shared memory; from _PG_init while preloading.
void RequestShmem();
bool Available();

// Where a queue's ring takes rows now: the current segment's table.
struct Place {
  int32 queue_id;
  int32 ring_id;
  Oid segment;  // the leaf that takes new rows
  int16 segment_number;
  // Every leaf of the ring, oldest first: read once to rebuild the lane.
  std::vector<Oid> leaves;
};

struct NewEntry {
  int64 id;
  int32 priority;
  int32 max_attempts;
  TimestampTz run_at;
  TimestampTz enqueued_at;
  Datum payload;
};

// Appends entries (one insert, under the insert lock).
void Append(const Place& place, const NewEntry* entries, int count);

// A job handed out by Claim.
struct Claimed {
  int64 id;
  int32 attempt;
  int32 max_attempts;
  int32 priority;
  TimestampTz run_at;
  TimestampTz enqueued_at;
  Datum payload;  // in the caller's memory context
};

// Up to `n` entries of the queue, each with a receipt appended and its
// lease entered (put back if the transaction rolls back). Raises 53400 when
// the lease map is full.
std::vector<Claimed> Claim(const Place& place, int32 n, TimestampTz now, TimestampTz lease_until);

// Whether any ring job of any database runs now (one atomic read): callers
// that would ask FindLease for many ids of table jobs skip it while none.
bool AnyLeases();

// What the lease map says of a running ring job.
struct Lease {
  Oid database;
  int32 queue_id;
  int32 attempt;
  TimestampTz lease_until;
  Oid entry_relid;
  ItemPointerData entry;
  // The claiming transaction, until which the lease fences nothing in
  // (InvalidTransactionId: a claim found committed by the rebuild).
  TransactionId claim_xid;
};
// The lease of `id`, if a ring job of this database runs with it.
bool FindLease(int64 id, Lease* lease);

// The ends of a claim, fenced by (id, attempt) against the lease map; each
// writes its row to the queue's current segment and takes the lease out
// (put back if the transaction rolls back). False: not the live attempt.
//   Close: a closure with `outcome` ('d' done, 'm' moved to pgq.jobs).
//   Extend: a receipt with the new lease.
bool Close(const Place& place, int64 id, int32 attempt, char outcome, TimestampTz now);
int Close(const Place& place, const int64* ids, const int32* attempts, int count, char outcome,
          TimestampTz now, bool* closed);
bool Extend(const Place& place, int64 id, int32 attempt, TimestampTz now, TimestampTz lease_until);

// The entry of a running ring job (its payload and the rest), read by its
// lease: for moving it to pgq.jobs.
bool ReadEntry(const Lease& lease, NewEntry* entry);

// Running ring jobs of this database whose lease ended before `now`, at
// most `max`.
std::vector<std::pair<int64, Lease>> Expired(TimestampTz now, int max);

// Forgets a queue's lane and leases (the queue was dropped).
void Forget(int32 queue_id);

}  // namespace pgq::pg::job_ring
