// The queues' rings (ADR 0028): every queue keeps its plain jobs — due at
// once, no parents; a grouped one while its group has room (TakesGrouped),
// one with a dedupe key (TakesKeyed) — on rings of its own
// (pgq.job_log_<ring>), written by pg/job_ring.h: one per priority it
// serves on rings (pgq.queue_rings: priority 0's, pgq.queues.ring_id, and up
// to kMaxPriorities - 1 others, each given by the maintenance once an
// enqueue asked for it, while the database has fewer rings than its share
// of lanes). Every other job is in pgq.job_rows, the waiting
// table (and so are all jobs of a server without the library preloaded, of
// a queue that could have no lane, of a priority without a ring, and of a
// queue of 2.x until the maintenance gives it its ring): a claim merges the
// due jobs there with the rings' in claim order. A running ring job that
// fails, is released, snoozed or cancelled, or whose lease ends, leaves
// its ring for a pending row or dead-letter; one that reports progress, or
// is carried out of a segment due to be reused, is moved into pgq.job_rows
// (running, with its attempt and lease). The readers see the rings' jobs
// through the view pgq.ring_jobs, a queue's rings one at a time through
// pgq.queue_ring_ids (store/read.cpp, store/queue_jobs.cpp, the install
// script's views).
#pragma once

#include <optional>
#include <vector>

#include "core/claim_hint.h"
#include "pg/job_ring.h"
#include "pg/spi.h"
#include "store/jobs.h"

namespace pgq::store::ring {

// The priorities a queue serves on rings, 0's included.
constexpr int kMaxPriorities = 4;

void CreateRing(pg::SpiSession& spi, int32 ring_id, TimestampTz now);
// The queue's rings (`ring_id`, priority 0's, and its priorities' rings):
// their ledger rows go now, their tables at a later maintenance pass
// (pg/segments.h DropRing); their lanes are forgotten.
void DropRings(pg::SpiSession& spi, int32 queue_id, int32 ring_id, TimestampTz now);

// A ring of a queue, and the priority of its jobs.
struct QueueRing {
  int32 queue_id;
  int32 priority;
  int32 ring_id;
  bool fair = false;  // its queue hands out in fair order (fairness => 'group', ADR 0029)
};
// The queue's rings, highest priority first (none without a ring).
std::vector<QueueRing> RingsOf(pg::SpiSession& spi, int32 queue_id);
// The rings of the queues of `scope` (the ones a lookup of a job by id may
// read, the caller's own: ReadJob, a child's parents, a cancel), by queue,
// highest priority first.
std::vector<QueueRing> RingsIn(pg::SpiSession& spi, const Scope& scope);

// Whether a job with `run_at` is due at once as a ring hands its jobs out:
// in the order they were appended, so not one dated before its
// transaction's start (the default run_at): a job backdated by its
// producer waits in pgq.job_rows and is claimed in run_at order there.
inline bool DueOnRing(TimestampTz run_at, TimestampTz now) {
  return run_at >= GetCurrentTransactionStartTimestamp() && run_at <= now;
}

// Whether a new job may go on a ring of the queue (one of its priority:
// Enqueue).
inline bool Takes(const Queue& queue, const NewJob& job, TimestampTz now) {
  return queue.ring_id != 0 && DueOnRing(job.run_at, now) && job.dedupe_key == 0 &&
         job.group_key == 0 && (job.parents == nullptr || job.parents->empty()) &&
         pg::job_ring::Available();
}

// Whether a new grouped job may go on a ring of the queue if its group has
// room (the caller asks under the group's lock): due now, no dedupe key or
// parents.
inline bool TakesGrouped(const Queue& queue, const NewJob& job, TimestampTz now) {
  return queue.ring_id != 0 && job.group_key != 0 && DueOnRing(job.run_at, now) &&
         job.dedupe_key == 0 && (job.parents == nullptr || job.parents->empty()) &&
         pg::job_ring::Available();
}

// Whether a new job with a dedupe key may go on a ring of the queue (its
// key's row taken first; a grouped one if its group has room, asked under
// the group's lock): due now, no parents, in a queue that has had no
// on_duplicate => 'replace' (whose jobs with a key stay rows).
inline bool TakesKeyed(const Queue& queue, const NewJob& job, TimestampTz now) {
  return queue.ring_id != 0 && job.dedupe_key != 0 && !queue.dedupe_replaces &&
         DueOnRing(job.run_at, now) && (job.parents == nullptr || job.parents->empty()) &&
         pg::job_ring::Available();
}

// Appends the jobs' entries to the queue's ring of `priority`; their ids
// from pgq.job_rows' sequence, into `ids`. False when the queue has no ring
// of that priority yet (the maintenance is asked for one, if the queue has
// room for it) or could have no lane (pg/job_ring.h Append): nothing
// appended, the caller inserts the jobs into pgq.job_rows.
// `run_at`: the jobs' (due by now: a default run_at is the transaction's
// start, as for a job of pgq.job_rows, which the merged claim order compares;
// enqueued_at, the transaction's start too).
// `group_key`: every job's group (text; 0: none).
// `dedupe_key` (text; 0: none), `dedupe_for` (interval; 0: none): one job,
// whose id its key's row drew (in ids[0]). `trace_context`: every job's
// (text; 0: none).
bool Enqueue(pg::SpiSession& spi, const Queue& queue, const Datum* payloads, int count,
             int32 max_attempts, int32 priority, TimestampTz run_at, int64* ids,
             Datum group_key = 0, Datum dedupe_key = 0, Datum dedupe_for = 0,
             Datum trace_context = 0);
// on_duplicate => 'replace' of the key's holder `id` while it is pending on
// a ring of `queue`: taken out (a tombstone and a closure 'm') and put in
// pgq.job_rows under its id with `job`'s payload, run_at and priority (its
// attempts, max_attempts and enqueued_at kept), as a pending row's replace
// leaves it. False: not pending on a ring (running, or a row).
bool ReplacePending(pg::SpiSession& spi, const Queue& queue, int64 id, const NewJob& job);

// The busiest keys of a fair queue's lanes (pg/job_ring.h BusiestFairKeys),
// the most served first, up to `max_keys` in all.
std::vector<pg::job_ring::FairKeyStat> BusiestFairKeys(pg::SpiSession& spi, int32 queue_id,
                                                       int max_keys);

// The rows of pgq.job_rows a claim of a ring queue deleted (`jobs`, store/
// claim.cpp ClaimOntoRingSql: those with `moved`), put onto their
// priority's ring already handed out (pg/job_ring.h AppendClaimed) with
// what the row carried: its attempt and lease, dedupe key and period,
// last_error, its children's mark (the lane told). (A grouped row stays a
// row: ClaimOntoRingSql.) A job with no ring, lane or lease to take it is inserted
// back as a running row, with the same lease.
void TakeOnto(pg::SpiSession& spi, int32 queue_id, const pg::Result& jobs, TimestampTz now);

// A fair queue's due rows of the ring's priority in its keys' turns
// (pg/job_ring.h RowsWanted, FileRows): when a scan is due, the due rows
// read in claim order and each key's first two filed in the ring's fair
// order; a
// claim of the ring then hands out their ids beside its entries (Claim's
// `rows`, claimed by store::ClaimRowIds). Nothing for a ring without a
// fair order.
// `due`: the table's index says a row of the ring's priority (or above)
// is due; false lets the keys the last scan named go.
void FileDueRows(pg::SpiSession& spi, int32 queue_id, int32 ring_id, int32 priority,
                 TimestampTz now, bool due);

// Up to `n` jobs of the queue's ring `ring_id`, leased until now +
// `lease`: rows as store::Claim's (pgq.claimed_job's columns, then run_at).
// With `before`, only the entries before it in claim order (the ring's
// jobs all have its priority: by run_at, then id).
// A fair ring's turns of due rows go to `rows` (ids, for store::ClaimRowIds).
pg::Result Claim(pg::SpiSession& spi, int32 queue_id, int32 ring_id, Datum name, int32 n,
                 Datum lease, TimestampTz now, const pg::job_ring::Bound* before = nullptr,
                 std::vector<pg::job_ring::RowTurn>* rows = nullptr);
// The keys of the entries the next claims would hand out first, up to
// `max_keys`, in claim order; how many (pg/job_ring.h Peek): of the ring
// `ring_id`, or of every ring of the queue.
int Peek(pg::SpiSession& spi, int32 queue_id, int32 ring_id, core::ClaimKey* next, int max_keys);
int Peek(pg::SpiSession& spi, int32 queue_id, core::ClaimKey* next, int max_keys);

// A running ring job's lease is in the map only once its queue's lane is
// built: after a start (or lanes freed), a completion may come before any
// claim or enqueue of its queue. Builds every ring queue's lane of this
// database once per lanes epoch (one statement, then an integer compare);
// Running and ExpireOnRings call it, and whoever asks AnyLeases first.
void EnsureLanes(pg::SpiSession& spi);

// What monitoring shows of the queue's rings (pg/job_ring.h CountPending,
// summed): nothing counted without shared memory or a ring.
pg::job_ring::Pending CountPending(pg::SpiSession& spi, int32 queue_id, int64 limit);

// The queue's running ring jobs as its cap counts them (pg/job_ring.h
// RunningCount, every ring of it); 0 without a ring.
int64 RunningCount(pg::SpiSession& spi, int32 queue_id);

// The lease of `id` if it is a running ring job of a queue in `scope`;
// while another transaction's completion or move of it is in progress,
// waits for that transaction first (pg/job_ring.h Lease::closer_xid).
//
// The ends below (Complete, Fail, GiveBack, Extend, MoveToTable,
// CompleteMany) take the lease out after this look, and another
// transaction may take it out in between: they wait for that one's end,
// and when it committed they find no lease and say "not held". The job may
// then be a running row of pgq.job_rows (a progress report or a turn's
// carry moved it, its attempt and lease kept), so every caller that got
// "not held" from the ring goes on to the table's statement, which ends it
// there or finds nothing (another attempt holds it, or it ended).
bool Running(pg::SpiSession& spi, const Scope& scope, int64 id, pg::job_ring::Lease* lease);

// Completes (id, attempt) on its ring: false if another attempt holds it.
// Where the queue keeps completed jobs, the job's history row (with
// `result`, 0 for none) is written from its entry and lease, as a table
// job's is from its row; elsewhere a result is not kept, as for a row.
bool Complete(pg::SpiSession& spi, const pg::job_ring::Lease& lease, int64 id, int32 attempt,
              Datum result, TimestampTz now);
// Fails (id, attempt) on its ring, running with `lease`: a closure 'f',
// and the job's next attempt as a pending row of pgq.job_rows due in
// `retry_in_us` (the rows are where a job waits for a later run_at), or,
// its attempts spent, its dead-letter row ('exhausted', its dependents
// failed). Nothing written when another attempt holds it (kLost). The
// counters and the claim hints are told, as for a row's failure.
FailOutcome Fail(pg::SpiSession& spi, const pg::job_ring::Lease& lease, int64 id, int32 attempt,
                 Datum error, int64 retry_in_us, TimestampTz now);
// Cancel of the running ring job `id` (its holder's claim fenced at once):
// a closure 'x' and its dead-letter row ('cancelled'), its dependents
// failed with it; false, nothing written, if its holder ended it first.
bool CancelRunning(pg::SpiSession& spi, const pg::job_ring::Lease& lease, int64 id,
                   TimestampTz now);
// Release (`run_at` nullopt: due as it was) or snooze (due at `run_at`)
// of (id, attempt) on its ring: a closure 'r' or 's', and the job pending
// again as a row of pgq.job_rows, its attempt not spent (a row's release
// and snooze keep it too); false, nothing written, if another attempt
// holds it. `wake`: its queue's waiting claims are woken at commit.
bool GiveBack(pg::SpiSession& spi, const pg::job_ring::Lease& lease, int64 id, int32 attempt,
              std::optional<TimestampTz> run_at, bool wake);
// Completes the ring jobs (ids[i], attempts[i]) of `queue_id`, running
// with leases[i], in one insert of closures a ring (and one of history
// rows where the queue keeps them); how many held their job.
int32 CompleteMany(pg::SpiSession& spi, int32 queue_id, const int64* ids, const int32* attempts,
                   const pg::job_ring::Lease* leases, int count, TimestampTz now);
// Dependencies on ring jobs (ADR 0028 "Dependencies on ring jobs").
// Of `ids`, the ring jobs of `place` that this transaction ended, those
// that children wait for: each one's parent lock taken exclusively first
// (children being added wait to be seen), when the lane may have
// dependents at all (none: nothing asked).
std::vector<int64> ParentsAmong(pg::SpiSession& spi, const pg::job_ring::Place& place,
                                const std::vector<int64>& ids);
// A child's side: of `ids` (jobs not found in pgq.job_rows), the
// unfinished ring jobs of queues in `scope`, each held as a parent until
// the transaction ends (its lock in share mode, taken after the lanes
// noted dependents, then the job looked at again: a job whose end is in
// progress is waited for, without the lock). `traceparents`: each held
// job's traceparent, if it has one (the child's trace links, ADR 0030).
std::vector<int64> HoldParents(pg::SpiSession& spi, const Scope& scope,
                               const std::vector<int64>& ids,
                               std::vector<std::string>* traceparents);

// The new lease_until, or nullopt when (id, attempt) no longer holds it.
std::optional<TimestampTz> Extend(pg::SpiSession& spi, const pg::job_ring::Lease& lease, int64 id,
                                  int32 attempt, TimestampTz lease_until);
// Moves the running ring job into pgq.job_rows with its attempt and lease, for
// the table's statements; false if (id, attempt) no longer holds it.
bool MoveToTable(pg::SpiSession& spi, const pg::job_ring::Lease& lease, int64 id, int32 attempt,
                 TimestampTz now);
// The jobs on the queue's rings that have not finished (0 without a ring):
// drop_queue refuses a queue that holds some, as for pgq.job_rows'.
int64 Unfinished(pg::SpiSession& spi, int32 queue_id);
// Maintenance: ring jobs whose lease ended (at most `batch`), each as a
// row's (store/expire.cpp): a closure 'e', then pending again as a row with
// its attempt, lease_until (a late completion of the expired claim still
// lands) and 'lease expired', or, its attempts spent, its dead-letter row
// ('expired'); counted for the metrics. How many of each.
Expired ExpireOnRings(pg::SpiSession& spi, TimestampTz now, int32 batch);

// Cancel of a job still in its ring (not handed out): found in `scope`,
// taken out of the ready order by a tombstone (pg/job_ring.h Tombstone);
// the caller buries it (dead.cpp, from pgq.ring_jobs, which still shows it
// pending), then CloseTakenOut writes its closure. False: no such job
// pending on a ring (running, claimed by an open transaction, finished, or
// not a ring job).
struct TakenOut {
  int32 queue_id;
  int32 ring_id;
  int segment;
  int32 attempts;  // spent
  pg::job_ring::Place place;
  Oid relid;              // its entry's segment
  ItemPointerData entry;  // and place there
};
// kWait: another transaction's cancel of the job is in progress, whose
// end WaitFor waits for (then look again).
pg::job_ring::TombstoneOutcome TakeOutPending(pg::SpiSession& spi, const Scope& scope, int64 id,
                                              TakenOut* out, TransactionId* wait_for);
void WaitFor(TransactionId xid);
// `outcome`: 'x' cancelled, 'm' moved into pgq.job_rows (ReplacePending).
void CloseTakenOut(const TakenOut& taken, int64 id, TimestampTz now, char outcome = 'x');
// Waits for the transaction whose claim holds `id`'s lease while it is in
// progress, for a job of a queue in `scope`; false if there is none
// (nothing to wait for).
bool WaitForClaim(pg::SpiSession& spi, const Scope& scope, int64 id);

// Maintenance: turns the rings of the queues whose current segment has
// taken entries for pgq.ring_turn and truncates the segments whose jobs
// have all finished (pg/job_ring.h: MayTruncate, AllClosed, LetGo).
// Gives the queues without a ring theirs (a queue of 2.x after the update,
// or one made by a server of 3.0's development), up to 100 a call; how many.
// Their jobs stay in pgq.job_rows, claimed from there as before.
int GiveRings(pg::SpiSession& spi, TimestampTz now);

struct MaintainCounts {
  int rings_given = 0;
  int rotated = 0;
  int truncated = 0;
  int carried = 0;  // running jobs carried into pgq.job_rows out of a segment due to be reused
};
MaintainCounts Maintain(pg::SpiSession& spi, TimestampTz now);

}  // namespace pgq::store::ring
