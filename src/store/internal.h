// What the files of the jobs store share, and nothing outside it uses.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "pg/job_ring.h"
#include "store/catalog.h"
#include "store/jobs.h"

namespace pgq::store::internal {

// Statements whose text is put together once (pg/spi.h).
using BuiltStatement = pg::BuiltStatement;

// `before` (a WITH clause, or nothing), then the insert into pgq.job_rows of
// `rows`, which give every column of a new job in this order:
//   id, queue_id, state, priority, run_at, attempt, max_attempts,
//   enqueued_at, dedupe_key, group_key, last_error, payload
// then `conflict` (an ON CONFLICT clause, or nothing). Returns the columns
// AfterInsert reads.
// `extra_columns` (", dedupe_for" ...) follow payload in the column list.
std::string InsertJobsSql(std::string_view before, std::string_view rows,
                          std::string_view conflict = {}, std::string_view extra_columns = {});

// A pending row of pgq.job_rows built here and inserted without a
// statement (pg/row_insert.h: a statement's set-up was a third of an
// enqueue's cost): a new plain job's, or a ring job's next claim (a retry,
// a release or snooze, a lease that ended). Unset columns are NULL.
struct JobRow {
  int64 id = 0;
  char state = 'p';  // 'p' pending, 'w' waiting behind its group's head
  int32 queue_id = 0;
  int32 priority = 0;
  TimestampTz run_at = 0;
  int32 attempt = 0;
  int32 max_attempts = 0;
  TimestampTz enqueued_at = 0;
  Datum payload = 0;
  Datum last_error = 0;         // 0: NULL
  bool has_dependents = false;  // false: NULL
  std::optional<TimestampTz> claimed_at;
  int32 claimed_by = 0;  // 0: NULL
  std::optional<TimestampTz> lease_until;
  Datum group_key = 0;      // 0: NULL
  Datum dedupe_key = 0;     // 0: NULL
  Datum dedupe_for = 0;     // 0: NULL
  Datum trace_context = 0;  // 0: NULL
};
// Whether the installed pgq.job_rows has every column JobRow sets (the
// catalog of the library's version has).
bool CanInsertJobRow(const Catalog& catalog);
void InsertJobRow(const Catalog& catalog, const JobRow& row);

// The moves into pgq.dead_jobs: `deleted` is a DELETE ... RETURNING * of
// pgq.job_rows, whose rows are buried with `last_error`, `reason` and `died_at`
// (SQL expressions over the deleted row d). Returns one row per job: its
// queue_id and group_key (the group moves on).
// It keeps progress and dedupe_for, writes the dead ring's current segment
// and returns id, dedupe_key and dedupe_for too (for KeysReleased).
std::string BurySql(std::string_view deleted, std::string_view last_error, std::string_view reason,
                    std::string_view died_at);

// After any statement built by InsertJobsSql: for each of `queues`, the
// pending jobs among `rows` lower its hint and wake its waiters at commit,
// and LISTEN pgq clients are told if it asks for it.
void AfterInsert(pg::SpiSession& spi, const Queue* queues, int count, const pg::Result& rows);
// The same for pending jobs of one queue whose first in claim order is `first`.
void AnnounceJobs(pg::SpiSession& spi, const Queue& queue, const core::ClaimKey& first);
// NOTIFY pgq with the queue's name, if the queue asks for it (its notify).
void NotifyListeners(pg::SpiSession& spi, const Queue& queue);

// The claim-order key (core/claim_hint.h) of a row with columns named
// priority, run_at and id; KeyColumns finds them once for a loop over rows.
struct KeyColumns {
  explicit KeyColumns(const pg::Result& rows);
  core::ClaimKey Of(const pg::Result& rows, uint64 row) const;
  int priority, run_at, id;
};
core::ClaimKey ClaimKeyOf(const pg::Result& rows, uint64 row);

// Jobs made pending again by a statement that returned their queue_id,
// priority, run_at and id: the hint comes back to the first of them; `wake`
// if they are due now.
void NotePendingAgain(const pg::Result& rows, bool wake);

// FIFO groups (groups.cpp). Only the first job of a group (the queue's
// group_concurrency first ones) is ever pending or running: its head; the
// others wait in state 'w', outside the ready index.
// Whoever adds a job to a group or removes its head holds the group's lock
// (pg/queue_lock.h) while deciding.
struct GroupRef {
  int32 queue_id;
  std::string group_key;
};
// The (queue_id, group_key) pairs of `rows` whose group key is not NULL.
std::vector<GroupRef> GroupsOf(const pg::Result& rows);
// The groups of `rows` and then those in `more`, for one MoveGroupsOn.
inline std::vector<GroupRef> GroupsOf(const pg::Result& rows, std::vector<GroupRef> more) {
  std::vector<GroupRef> groups = GroupsOf(rows);
  for (GroupRef& group : more) groups.push_back(std::move(group));
  return groups;
}
// Moves each group on: its lowest-id job becomes pending if the group has
// nothing pending or running. In (queue, key) order: no deadlock between two
// callers.
void MoveGroupsOn(pg::SpiSession& spi, std::vector<GroupRef> groups);
// Grouped jobs on rings (ADR 0028, "Groups on the rings"): whether the
// group has room for a job of its own now (nothing of it waits, and its
// pending and running jobs, rows and holds, are fewer than the queue's
// group_concurrency); the caller holds the group's lock.
bool GroupHasRoom(pg::SpiSession& spi, const Queue& queue, Datum group_key);
// The same for one job of a batch: counts once per group and batch
// (`room`, nullptr: every time), and takes a place when there is one (the
// caller then puts the job in the group's room: on the ring or pending).
bool TakeGroupRoom(pg::SpiSession& spi, const Queue& queue, Datum group_key, GroupRoom* room);
// The hold that counts a grouped ring job in its group's room.
void HoldGroup(pg::SpiSession& spi, int32 queue_id, Datum group_key, int64 job_id);
// The holds of these jobs go (they left the ring); their groups, for one
// MoveGroupsOn.
std::vector<GroupRef> LetGroupsGo(pg::SpiSession& spi, const std::vector<int64>& job_ids);

// Dedupe keys (keys.cpp; pgq.dedupe_holds, the one place a key is taken).
// The key `key` of the queue for a new job: the job's id, drawn now, when
// the key was free (or kept by a finished job for a period now past); 0
// when it is taken.
int64 TakeKey(pg::SpiSession& spi, const Queue& queue, Datum key, TimestampTz now);
// Job `id` of `queue_id`, holding `key`, ended (done, dead or cancelled):
// the key stays taken until `finished_at` plus `dedupe_for` (an interval;
// 0: free at once), and a job following it (enqueued with on_duplicate =>
// 'replace' while it ran) takes it over and is pending.
// Returns the groups of the followers it brought in waiting: the caller
// moves them on with the groups of the jobs that finished, in one call (one
// lock order, groups.cpp).
std::vector<GroupRef> KeyReleased(pg::SpiSession& spi, int32 queue_id, Datum key, int64 id,
                                  Datum dedupe_for, TimestampTz finished_at);
// The same for the jobs that left pgq.job_rows, as rows with columns
// queue_id, id, dedupe_key and dedupe_for.
std::vector<GroupRef> KeysReleased(pg::SpiSession& spi, const pg::Result& rows,
                                   TimestampTz finished_at);
// A WITH item that makes each revived dead job (`revived`, rows of
// pgq.dead_jobs; $2 their queue) its dedupe key's live holder, over a
// period a finished job kept it for (dead.cpp's retry_dead; a live holder
// that came meanwhile keeps it, which dead.cpp checks after).
std::string_view RevivedKeysSql();
// The DELETE ... RETURNING f.* that takes a follower out of
// pgq.dedupe_followers to be cancelled (dead.cpp buries it in the same
// statement): $1 its id, $3 $4 the caller's scope (SetScope).
std::string_view CancelledFollowerSql();
// $1 queue id, $2 payload, $3 run_at, $4 priority, $5 dedupe key, $6
// max_attempts, $7 group key, $8 dedupe_for: the parameters of every
// statement that inserts or replaces one job (insert.cpp, keys.cpp).
pg::Params& SetJobParams(pg::Params& params, const Queue& queue, const NewJob& job);

// Dependencies (dependencies.cpp).
// Parents `parents` (locked by LockParents) of `children`: one row each
// pair, and each parent marked has_dependents.
void AddDependencies(pg::SpiSession& spi, const std::vector<int64>& parents,
                     const std::vector<int64>& children);
// Jobs that completed (at `now`) and had dependents: their children's
// counts go down, and a child with none left is ready (noted in the ledger)
// or, in a FIFO group, waiting: returned for the caller's one MoveGroupsOn.
// At most 1,000 children in all are released here; parents with more left
// are recorded in pgq.dependency_releases, whose children maintenance
// releases (TendDependencies).
std::vector<GroupRef> ParentsDone(pg::SpiSession& spi, const std::vector<int64>& parents,
                                  TimestampTz now);
// Jobs that died (rows with an "id" column, as BurySql returns): those with dependents are failed
// parents, whose dependents are dead-lettered (a bounded part now, the rest by maintenance).
void ParentsDied(pg::SpiSession& spi, const pg::Result& rows, TimestampTz now);
void ParentsDied(pg::SpiSession& spi, const std::vector<int64>& ids, TimestampTz now);

// Deletes every dead job of the queue named `queue` (text), a queue being
// dropped (dead.cpp).
void DeleteQueueDead(pg::SpiSession& spi, Datum queue);
// Moves at most `max` dead jobs kept for good by a queue that has a keep_dead
// now out of pgq.dead_jobs_kept: into the ring of that keep if still within
// it as of `now`, else nowhere (dead.cpp; history.cpp's pass calls it).
void MoveKeptDead(pg::SpiSession& spi, TimestampTz now, int32 max);

// An int8[] of `values`, in the current memory context.
Datum Int8Array(const std::vector<int64>& values);
Datum Int4Array(const std::vector<int32>& values);
Datum TextArray(const std::vector<std::string>& values);

// Where completions go (history.cpp). `variant`: 1 no queue keeps
// completed jobs; 2 some do: `keeping`, an int4[] of their
// ids, and `segments`, an int2[] of the segment of pgq.job_history each
// one's completions go to (its retention class's current, ADR 0021), as
// this backend last read them (refreshed with the queue cache).
struct HistoryTarget {
  int variant;
  Datum keeping;
  Datum segments;
};
const HistoryTarget& CompletionTarget(pg::SpiSession& spi);

// A ring job completed where its queue keeps history: its entry (read
// while its lease held), the attempt and the claim's time.
struct RingCompletion {
  pg::job_ring::NewEntry entry;
  int32 attempt;
  TimestampTz claimed_at;
};
// Their history rows (finish.cpp, which writes pgq.job_history), with
// `result` (0: none), in one insert.
void KeepRingHistory(pg::SpiSession& spi, int32 queue_id, const std::vector<RingCompletion>& done,
                     Datum result, TimestampTz now);

// `jobs` completions of `queue_id`, for done_recent and the completions
// counter: in shared memory when preloaded (flushed to pgq.finished by
// maintenance, one row per queue and pass), else one pgq.finished row.
void CountFinished(pg::SpiSession& spi, int32 queue_id, int32 jobs);
// A job of `queue_id` dead-lettered (exhausted, expired, cancelled, its
// parent dead): counted for pgq.metrics() and one fewer unfinished.
void CountDead(int32 queue_id);

// Sets parameters `first` (boolean) and `first` + 1 (int4[]) to `scope`, for
// a WHERE clause `($first OR queue_id = ANY ($first + 1))`.
inline pg::Params& SetScope(pg::Params& params, int first, const Scope& scope) {
  return params.Set(first, BoolGetDatum(scope.every)).Set(first + 1, scope.ids);
}

}  // namespace pgq::store::internal
