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
// vacuum_index_cleanup = off and an index that holds no row
// (store/ring_jobs.cpp), so a VACUUM leaves a rolled-back row's line
// pointer dead until the segment is truncated.
// INVARIANT (claim order across segments): entries go to the current
// segment of the newest turn the lane knows (Append moves the lane on when
// its caller read a later turn; LetGo when a truncation does), and a turn
// happens under the insert lock of the first append after it. The cursor
// leaves a segment only once it has read it to its end after entries left
// it, so no entry of it is placed behind the cursor; an in-progress entry
// it passed stays in the passed set, whatever segment it is in.
// INVARIANT (a segment holds its jobs): a receipt or closure goes to its
// entry's segment, so a segment whose entries are all closed holds nothing
// a live job needs and is truncated alone (MayTruncate, AllClosed).
// INVARIANT (one holder): an entry is handed out under the claim lock and
// the cursor moves past it at once; it comes back only through the
// given-back list (the claim rolled back).
// INVARIANT (the fence): the lease map holds one attempt per running ring
// job; a completion or extension of another attempt finds nothing.
//
// Without shared memory (not preloaded) there is no ring: queues keep their
// jobs in pgq.job_rows.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "pg/pg.h"

namespace pgq::pg::job_ring {

// pgq.job_log's columns (the install script's order).
enum Column : int {
  kRing = 1,  // the queue's ring id (pgq.queues.ring_id)
  kSegment,
  kKind,  // 'e' entry, 'a' entry claimed as it was written (AppendClaimed), 'r' receipt,
          // 'c' closure
  kId,
  kAttempt,  // entry: attempts already spent; claimed entry, receipt, closure: the attempt
  kPriority,
  kMaxAttempts,
  kRunAt,
  kEnqueuedAt,
  kLeaseUntil,    // receipt
  kAt,            // receipt: claimed at; closure: closed at
  kOutcome,       // closure: 'd' done, 'm' moved to pgq.job_rows, 'x' cancelled
  kPayload,       // entry
  kClaimedBy,     // a claim's receipt: the claiming backend's pid
  kGroupKey,      // entry: the job's group key (NULL: none)
  kDedupeKey,     // entry: the job's dedupe key (NULL: none; pgq.dedupe_holds names the job)
  kDedupeFor,     // entry: how long the key stays taken after the job (NULL: not at all)
  kLastError,     // claimed entry: the error of the attempt before (NULL: none)
  kEntry,         // claimed entry, its receipts and closure: its claim's number (pgq.claim_seq)
  kTraceContext,  // entry: the job's W3C trace context (NULL: none; ADR 0030)
  kColumns = kTraceContext
};
// INVARIANT: columns are only ever added to pgq.job_log, last, never
// dropped: its leaves' tuples are formed by these numbers, and a ring made
// later (LIKE pgq.job_log) would number them without the dropped ones.

// Requests the shared memory; from _PG_init while preloading.
void RequestShmem();
bool Available();

// A queue's ring as a backend read it from the ledger (pgq.rings): its
// segments, which one takes new entries, and the turn that made it so.
// Entries go to the current segment of the latest turn the lane has seen
// (a backend that read the ledger before a turn writes where the lane
// says); a receipt or closure goes to its entry's segment, so a segment
// holds every row of its jobs and is truncated alone.
struct Place {
  int32 queue_id;
  int32 ring_id;
  int16 first;              // the segment column of leaves[0]
  int current;              // the segment that takes new entries, 0 .. leaves.size() - 1
  int64 generation;         // the ledger's turn count when it was read
  std::vector<Oid> leaves;  // the ring's segment tables, segment 0 first
  // Its queue hands out in fair order across group keys (fairness =>
  // 'group', ADR 0029): its lane keeps a fair order while one is free.
  bool fair = false;
  // The weights of its keys other than 1, by FairKey (pgq.group_weights);
  // nullptr: every key weighs 1.
  std::shared_ptr<const std::unordered_map<uint64, uint32>> weights;
  // A digest of `weights` (0: none): a lane whose fair order was weighed
  // by other weights weighs its keys again.
  uint64 weights_stamp = 0;
  // rate_limit_per_key: jobs a second that start per key (0: no limit);
  // kept by the fair order's token bucket of each key.
  double key_rate = 0;
};

// The key a fair lane files a job under: a hash of its group key.
uint64 FairKey(std::string_view group_key);

struct NewEntry {
  int64 id;
  int32 priority;
  int32 max_attempts;
  TimestampTz run_at;
  TimestampTz enqueued_at;
  Datum payload;
  Datum group_key = 0;      // text; 0: no group
  Datum dedupe_key = 0;     // text; 0: none
  Datum dedupe_for = 0;     // interval; 0: none
  Datum last_error = 0;     // text; 0: none (a claimed entry's, AppendClaimed)
  int64 claim_no = 0;       // a claimed entry's number (AppendClaimed); 0: an entry 'e'
  Datum trace_context = 0;  // text; 0: none
};

// Appends entries (one insert, under the insert lock). False, with nothing
// appended, when no lane is to be had (every one of the database's share in
// use): the caller puts the jobs in pgq.job_rows, so an enqueue is never
// refused for the lanes' sizing.
bool Append(const Place& place, const NewEntry* entries, int count);

// A due row of pgq.job_rows taken by a claim (store/claim.cpp) goes onto
// its ring already handed out: one row of kind 'a' per job — its entry and
// its claim's receipt at once (attempt `attempts[i]`, the claim's) — and
// its lease entered, dropped again if the transaction rolls back. No
// cursor ever hands out an 'a' (they take 'e' only), and an 'a' never
// moves the rebuild's cursor: the row was claimed in claim order from the
// table, not from the ring. It and its receipts and closure carry its
// claim's number (NewEntry::claim_no, kEntry, drawn by the caller from a
// sequence): its id and attempt alone may repeat in a ring (a job retried
// from the dead-letter table starts its attempts again), and a row's
// place changes in a dump and restore. leased[i]: false where
// the lease map had no room — that job's row is closed ('m') at once and
// the caller keeps it a running row of pgq.job_rows. False, with nothing
// written, when no lane is to be had.
bool AppendClaimed(const Place& place, const NewEntry* entries, const int32* attempts, int count,
                   TimestampTz now, TimestampTz lease_until, bool* leased);

// A job handed out by Claim.
struct Claimed {
  int64 id;
  int32 attempt;
  // No lease: the database's share of the lease map (or the map) was full.
  // Closed on the ring ('m'); the caller makes it a running row of
  // pgq.job_rows in the same transaction (store/ring_jobs.cpp Claim).
  bool spilled;
  int32 max_attempts;
  int32 priority;
  TimestampTz run_at;
  TimestampTz enqueued_at;
  Datum payload;        // in the caller's memory context
  Datum group_key;      // text in the caller's memory context; 0: no group
  Datum dedupe_key;     // text in the caller's memory context; 0: none
  Datum dedupe_for;     // interval in the caller's memory context; 0: none
  Datum trace_context;  // text in the caller's memory context; 0: none
};

// A position in claim order among a ring's entries (all of priority 0):
// by run_at, then id.
struct Bound {
  TimestampTz run_at;
  int64 id;
};

// Up to `n` entries of the queue, each with a receipt appended and its
// lease entered (put back if the transaction rolls back); with `before`,
// only entries that come before it (the claim stops at the first that does
// not, and the next claim starts there). Never refused for the lease map:
// those past the room for leases are spilled (Claimed::spilled). A fair
// lane's turns of due rows (FileRows) count among the `n`: their ids go to
// `rows`, in the order taken, for the caller to claim (one no longer due
// or taken meanwhile loses its turn; the row stays for the next scan).
struct RowTurn {
  int64 id;
  bool grouped;  // it has a group key (filed under it)
};
std::vector<Claimed> Claim(const Place& place, int32 n, TimestampTz now, TimestampTz lease_until,
                           const Bound* before, std::vector<RowTurn>* rows);
// The keys of the entries the next claims would hand out first, in that
// order, up to `max_keys` (into `next`); how many. Takes nothing; moves
// the claim cursor past the rows at it that are no entry, as a claim
// would.
int Peek(const Place& place, Bound* next, int max_keys);

// The lane of the queue built now if it is not (its leases entered from the
// ring's rows); false if no lane is free. The leases of a ring are in the
// map only once its lane is built, after a start at its first use: a
// completion or the maintenance's expiry, which ask the map by id, build
// their database's lanes first (store/ring_jobs.cpp EnsureLanes), again
// whenever LanesEpoch has moved on (lanes freed with their leases).
bool Build(const Place& place);
uint32 LanesEpoch();
// Whether this database's lanes were all built (Build) since `epoch` by
// some backend, and noting that they were: EnsureLanes once a database
// and epoch, not once a backend (each build reads a ring).
bool LanesEnsured(uint32 epoch);
void NoteLanesEnsured(uint32 epoch);

// The queue's running ring jobs as a cap counts them: leases held, and
// leases taken out by completions not yet committed (a table job counts as
// running until its completion commits). Claims that have not committed
// count too (their leases are in the map), as a table's dirty count does.
int64 RunningCount(const Place& place);

// Whether any ring job of any database runs now (one atomic read): callers
// that would ask FindLease for many ids of table jobs skip it while none.
bool AnyLeases();

// What the lease map says of a running ring job.
struct Lease {
  Oid database;
  int32 queue_id;
  int32 ring_id;  // the ring of its entry (its queue's, of its priority)
  int32 attempt;
  TimestampTz lease_until;
  Oid entry_relid;
  ItemPointerData entry;
  // The claiming transaction, until which the lease fences nothing in
  // (InvalidTransactionId: a claim found committed by the rebuild).
  TransactionId claim_xid;
  // The queue's lane, whose count of leases holds this one (a database's
  // share of the map is the sum of its lanes' counts).
  int32 lane;
  TimestampTz claimed_at;
  // A transaction that took the lease out (a completion, a move into
  // pgq.job_rows) and has not ended: the lease stays in the map until it
  // commits (then it goes) or rolls back (then it holds again), so that
  // whoever asks meanwhile waits for it, as for a table job's row lock.
  TransactionId closer_xid;
  int32 claimed_by;  // the claiming backend's pid (its receipt's), 0: not known
  bool grouped;      // its entry has a group key (a row of pgq.group_holds counts it)
  bool keyed;        // its entry has a dedupe key (its row of pgq.dedupe_holds names it)
  int64 claim_no;    // its entry is an 'a' (AppendClaimed) of this number (kEntry); 0: an 'e'
  // Its claim was prepared (PREPARE TRANSACTION): if that rolls back, no
  // callback of ours runs, and the maintenance gives the claim up
  // (Expired, GiveUpClaim). Only such a claim: an ordinary one's own
  // rollback drops the lease and gives its entry back.
  bool prepared = false;
  // Its entry's fair key (a hash of its group key, 0: none): a fair queue's
  // running jobs per key (BusiestFairKeys).
  uint64 fair_key = 0;
};
// The lease of `id`, if a ring job of this database runs with it: false
// when there is none, or its closer committed or is this transaction.
// `wait_for`: the closer still in progress (InvalidTransactionId when the
// lease holds); wait for it (WaitForCloser) and ask again.
bool FindLease(int64 id, Lease* lease, TransactionId* wait_for);
// Waits for a closer's transaction to end.
void WaitForCloser(TransactionId xid);

// The ends of a claim, fenced by (id, attempt) against the lease map; each
// writes its row to its entry's segment. Close takes the lease out: it
// stays in the map, closing, until the transaction ends (gone at commit,
// holding again at rollback). False: not the live attempt, or another
// transaction's close of it is in progress (its xid in `wait_for`, when
// given: wait for it and ask again).
//   Close: a closure with `outcome` ('d' done, 'm' moved to pgq.job_rows).
//   Extend: a receipt with the new lease.
bool Close(const Place& place, int64 id, int32 attempt, char outcome, TimestampTz now,
           TransactionId* wait_for = nullptr);
int Close(const Place& place, const int64* ids, const int32* attempts, int count, char outcome,
          TimestampTz now, bool* closed, TransactionId* wait_for = nullptr);
bool Extend(const Place& place, int64 id, int32 attempt, TimestampTz now, TimestampTz lease_until,
            TransactionId* wait_for = nullptr);

// The entry of a running ring job (its payload and the rest), read by its
// lease: for moving it to pgq.job_rows.
bool ReadEntry(const Lease& lease, NewEntry* entry);

// Running ring jobs of this database whose lease ended before `now`, at
// most `max`. `abandoned` (at most `max` too): leases whose claim was
// prepared and rolled back (ROLLBACK PREPARED: no callback of ours runs),
// which nothing else drops: give each up (GiveUpClaim).
std::vector<std::pair<int64, Lease>> Expired(TimestampTz now, int max,
                                             std::vector<std::pair<int64, Lease>>* abandoned);
// Drops the lease of `id` if it is still `lease`'s abandoned claim's, and
// gives an entry claimed from the ring (not an 'a') back to the lane, to be
// handed out again as the claim's rollback would have; `segment`: its
// entry's segment in `place`. Whether it was dropped.
bool GiveUpClaim(const Place& place, int64 id, const Lease& lease, int segment);

// Running ring jobs of this database whose entry is in the segment
// `segment_relid` (claims committed, nothing closing them), at most `max`:
// the jobs a ring's turn waits for, carried into pgq.job_rows
// (store/ring_jobs.cpp Maintain).
std::vector<std::pair<int64, Lease>> RunningIn(Oid segment_relid, int max);

// A tombstone: the entry (`segment`, `entry`) of job `id`, still in the
// ring and not handed out, is taken out of the given-back list or noted so
// that no claim hands it out. If the transaction rolls back it is undone:
// noted still, the note goes; passed by a claim meanwhile (which took the
// cancel for done), the entry is given back as `attempt`. The
// caller then writes its closure (CloseEntry, in the entry's segment) and,
// before that, takes the segment's ROW EXCLUSIVE lock (a truncation waits
// for it). False: a claim has it (running, or its claim not committed).
// Raises 53400 when the lane holds as many tombstones the cursor has not
// reached as it can. kNotPending: a claim has it (running, or its claim
// not committed), or a cancel did (committed, or this transaction's);
// kWait: another transaction's cancel of it is in progress (`wait_for`):
// wait for it and look again.
enum class TombstoneOutcome { kTombstoned, kNotPending, kWait };
TombstoneOutcome Tombstone(const Place& place, int64 id, int segment, ItemPointerData entry,
                           int32 attempt, TransactionId* wait_for);
// A closure of job `id` in segment `segment`, outside the lease map: for a
// job that holds no lease (a tombstone's).
void CloseEntry(const Place& place, int segment, int64 id, int32 attempt, char outcome,
                TimestampTz now);

// Truncating a segment of a queue's ring (store/ring_jobs.cpp, through
// the ring layer's Reclaim), in three asks:
//   MayTruncate: shared memory holds nothing of segment `segment` — no
//     entry of it waits to be handed out again or was passed in progress,
//     no lease of it is held (cheap; asked before and under the lock).
//   AllClosed: under the segment's ACCESS EXCLUSIVE lock, its rows say so:
//     every committed entry has a closure (all of a job's rows are in its
//     entry's segment).
//   LetGo: then the lane moves off it — entries go to the current segment
//     of the newest turn (`place`, read with the ledger row locked) and a
//     cursor left in it moves to the next one. False if the lane still
//     places entries there (it is the current one).
bool MayTruncate(const Place& place, int segment);
bool AllClosed(Oid segment_relid);
bool LetGo(const Place& place, int segment);

// Dependencies on ring jobs (ADR 0028, store/ring_jobs.cpp HoldParents):
// a child's enqueue that names a ring job notes, before it looks at the
// job, that the jobs of its queue's lane may have dependents; whoever ends
// a job (Close, a tombstone) asks MayHaveDependents after taking it, and
// if so looks for its children (one atomic read while no lane of the
// server has noted any). NoteDependentsOfDatabase: every lane of this
// database, after a start that finds children waiting. Noted until the
// lanes are freed.
void NoteDependents(const Place& place);
void NoteDependentsOfDatabase();
bool MayHaveDependents(const Place& place);
// The transaction of a cancel in progress of the entry (`segment`,
// `entry`), noted by its tombstone (InvalidTransactionId: none, or this
// transaction's).
TransactionId CancelInProgress(const Place& place, int segment, ItemPointerData entry);

// What monitoring shows of a queue's ring (queue_overview, queue_metrics,
// metrics()), at a cost bounded by `limit` whatever the ring holds, with
// no lock a claim waits for beyond a copy of the lane's state: its pending
// entries (given back, passed and since committed, then from the cursor
// on; committed, not cancelled) counted up to `limit`, past which the walk
// stops and the rest is estimated from the blocks left (`cut`); the run_at
// of the oldest one seen (DT_NOEND: none). Uses the queue's lane if it has
// one or one is free, never taking another queue's back: with none,
// `no_lane` and nothing counted (its queue has no running ring job then).
struct Pending {
  int64 count = 0;
  TimestampTz oldest = DT_NOEND;
  bool cut = false;
  bool no_lane = false;
};
Pending CountPending(const Place& place, int64 limit);
// A fair queue's due rows of pgq.job_rows of this ring's priority
// (retries, scheduled jobs, a capped group's jobs let in) take their keys'
// turns (ADR 0029 "Rows"): the caller scans the table for due rows when
// RowsWanted says so (a key's filed rows ran out, or a round of its keys
// went by since the last scan: a key whose rows became due is filed within
// a round) and files them, a few per key (FileRows); a claim then hands out
// their ids in fair order beside the entries (Claim's `rows`).
// RowsWanted: false for a lane without a fair order, and when no row is
// `due` (the table's index says so; the keys the last scan named let go).
// A scan reads due rows in claim order up to a limit (FileRows' `read`):
// one cut short says where it stopped (`cut_at`; nullptr: it read them
// all) and the next goes on after it (`from`, valid when `*has_from`),
// so that every due row is read in turn however many there are; and the
// next scan waits for a claim per 64 rows the last one read, so that a
// deep table costs each claim at most a 64th of a scan.
bool RowsWanted(const Place& place, bool due, Bound* from, bool* has_from);
struct DueRow {
  int64 id;
  Datum group_key;  // text; 0: none
};
void FileRows(const Place& place, const std::vector<DueRow>& rows, bool from_first,
              const Bound* cut_at, int64 read);
// What a fair lane holds of its busiest keys (pgq.fair_keys, metrics()):
// up to `max_keys` of the keys with ready jobs, the most served first.
// Read from a copy of the fair order, each key's group key from its next
// job's entry (a key whose entry is gone meanwhile is left out).
struct FairKeyStat {
  std::string group_key;  // "" for jobs without a group key
  uint32 weight;
  int32 held;               // its ready jobs the lane holds sorted
  bool more;                // more of its ready jobs wait on the ring
  uint64 served;            // claims since it became active
  int32 running;            // its jobs running on the ring (leases held or closing);
                            // store::ring::BusiestFairKeys adds its running rows
  TimestampTz ready_since;  // its next job's run_at
  // A key whose only ready jobs are due rows of pgq.job_rows (FileRows):
  // its next row's id; group_key and ready_since are the caller's to read
  // (store::ring::BusiestFairKeys).
  int64 row = 0;
};
std::vector<FairKeyStat> BusiestFairKeys(const Place& place, int max_keys);

// The running ring jobs of this database per queue (claims committed,
// completions not), and how many of them have a lease past `now`: one walk
// of the lease map.
struct Running {
  int64 running = 0;
  int64 expired = 0;
};
std::vector<std::pair<int32, Running>> CountRunning(TimestampTz now);
// The running ring jobs of this database's queues for which `of_queue`
// answers true (as CountRunning counts them), each with its lease and its
// entry's max_attempts and enqueued_at: one walk of the lease map and a
// read of each entry, whatever the rings hold (running_jobs,
// queue_workers).
struct RunningJob {
  int64 id;
  Lease lease;
  int32 max_attempts;
  TimestampTz enqueued_at;
};
std::vector<RunningJob> RunningJobs(const std::function<bool(int32)>& of_queue);

// Forgets a ring's lane and leases (its queue was dropped).
void Forget(int32 ring_id);
// Forgets every lane and lease of `database`: its pgq_cpp was created or
// dropped, or it was dropped (bgw/database_hooks.cpp).
void ForgetDatabase(Oid database);

}  // namespace pgq::pg::job_ring
