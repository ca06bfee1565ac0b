// Dead-letter: jobs move into pgq.dead_jobs whole (exhausted, expired,
// cancelled) and come back with fresh attempts (retry_dead).
#include "pg/args.h"
#include "pg/ledger.h"
#include "store/internal.h"
#include "store/ring_jobs.h"
#include "store/retention.h"

namespace pgq::store {

namespace {

// The one column list of pgq.dead_jobs: `before` (a WITH clause), then the
// insert of `rows`, a SELECT that gives every column of a dead job in this
// order:
//   id, queue, payload, attempts, last_error, reason, died_at, priority,
//   max_attempts, enqueued_at, dedupe_key, group_key, progress, dedupe_for,
//   segment
std::string InsertDeadSql(std::string_view before, std::string_view rows) {
  std::string sql(before);
  sql += R"sql(
INSERT INTO pgq.dead_jobs (id, queue, payload, attempts, last_error, reason, died_at, priority,
                           max_attempts, enqueued_at, dedupe_key, group_key, progress,
                           dedupe_for, segment, trace_context, trace_links))sql";
  sql += rows;
  return sql;
}

// The segment of the dead ring a job of the queue d.queue_id dies into: the
// current one of its queue's keep_dead (ADR 0021).
std::string DeadSegmentSql() {
  return internal::SegmentOfKeepSql(
      false, "(SELECT q.keep_dead FROM pgq.queues q WHERE q.queue_id = d.queue_id)");
}

// The first two columns of a dead job whose live row (pgq.job_rows or
// pgq.dedupe_followers) is d: its queue's name comes from a scalar
// subquery into a NOT NULL column, so that if the queue were somehow gone
// the statement fails instead of losing the job.
constexpr std::string_view kQueueNameOfD = R"sql(
SELECT d.id, (SELECT name FROM pgq.queues q WHERE q.queue_id = d.queue_id))sql";

// The queue id of a row just inserted (dead_jobs keeps the queue's name).
constexpr std::string_view kReturnQueueId = R"sql(
RETURNING (SELECT q.queue_id FROM pgq.queues q WHERE q.name = dead_jobs.queue) AS queue_id)sql";

}  // namespace

namespace internal {

// Each deleted job whole (its queue's name by kQueueNameOfD), with its
// progress and dedupe period, into the current segment of its queue's dead
// ring (ADR 0021); returns its key too (KeysReleased).
std::string BurySql(std::string_view deleted, std::string_view last_error, std::string_view reason,
                    std::string_view died_at) {
  std::string before = "WITH d AS (";
  before += deleted;
  before += ")";
  std::string rows(kQueueNameOfD);
  rows += ", d.payload, d.attempt, ";
  rows += last_error;
  rows += ", '";
  rows += reason;
  rows += "', ";
  rows += died_at;
  rows += R"sql(, d.priority, d.max_attempts, d.enqueued_at, d.dedupe_key, d.group_key,
       d.progress, d.dedupe_for,
       )sql";
  rows += DeadSegmentSql();
  rows += ", d.trace_context, d.trace_links\n  FROM d";
  std::string sql = InsertDeadSql(before, rows);
  sql += kReturnQueueId;
  sql += ",\n          group_key, id, dedupe_key, dedupe_for";
  return sql;
}

}  // namespace internal

namespace {

using internal::BuiltStatement;

// A running job too: deleting its row fences its claim at once.
constexpr std::string_view kCancel = R"sql(
DELETE FROM pgq.job_rows WHERE id = $1 AND state IN ('p', 'w', 'r', 'b') AND ($3 OR queue_id = ANY ($4))
RETURNING *)sql";

pg::Statement& cancel_job() {
  static BuiltStatement statement{internal::BurySql(kCancel, "d.last_error", "cancelled", "$2"),
                                  {INT8OID, TIMESTAMPTZOID, BOOLOID, INT4ARRAYOID}};
  return statement.get();
}

// A follower of a running holder cancelled (keys.cpp takes it out of
// pgq.dedupe_followers): into dead-letter without its key, which stays its
// holder's. $1 id, $2 now, $3 $4 scope.
pg::Statement& cancel_follower() {
  const auto sql = [] {
    std::string rows(kQueueNameOfD);
    rows += R"sql(, d.payload, 0, NULL, 'cancelled', $2, d.priority, d.max_attempts,
       d.enqueued_at, NULL, d.group_key, NULL, d.dedupe_for,
       )sql";
    rows += DeadSegmentSql();
    rows += ", d.trace_context, NULL\n  FROM d";
    std::string taken = "WITH d AS (";
    taken += internal::CancelledFollowerSql();
    taken += ")";
    return InsertDeadSql(taken, rows) + std::string(kReturnQueueId);
  };
  static BuiltStatement statement{sql(), {INT8OID, TIMESTAMPTZOID, BOOLOID, INT4ARRAYOID}};
  return statement.get();
}

// A dropped queue's dead jobs (PurgeQueueJobs, queue_jobs.cpp).
pg::Statement delete_queue_dead = {
    "DELETE FROM pgq.dead_jobs WHERE queue = $1", 1, {TEXTOID}, nullptr};

// $1 queue name, $2 died at or before.
pg::Statement purge_dead = {"DELETE FROM pgq.dead_jobs WHERE queue = $1 AND died_at <= $2",
                            2,
                            {TEXTOID, TIMESTAMPTZOID},
                            nullptr};

// $1 id, $2 its queue's id (the caller's rights were checked on it).
pg::Statement purge_dead_job = {R"sql(
DELETE FROM pgq.dead_jobs d USING pgq.queues q
 WHERE d.id = $1 AND q.queue_id = $2 AND d.queue = q.name
RETURNING d.id)sql",
                                2,
                                {INT8OID, INT4OID},
                                nullptr};

// $1 id, $2 now. A dead job past its queue's keep_dead is gone to its
// readers (ADR 0021), whether or not its ring has turned yet.
pg::Statement queue_of_dead_job = {R"sql(
SELECT q.queue_id FROM pgq.dead_jobs d JOIN pgq.queues q ON q.name = d.queue
 WHERE d.id = $1 AND (q.keep_dead IS NULL OR d.died_at + q.keep_dead > $2))sql",
                                   2,
                                   {INT8OID, TIMESTAMPTZOID},
                                   nullptr};

// A dead job whose dedupe key is held again by a live job stays dead: two
// live jobs with one key is what dedupe exists to prevent. A job of a FIFO
// group comes back waiting; its group then moves on, which makes it pending
// if its group has nothing else. $2 queue id, $3 run_at.
// A dead job past its queue's keep_dead (its ring has not turned yet) is
// not brought back: its readers no longer show it. $3 now.
constexpr std::string_view kDedupeFree = R"sql(
(d.dedupe_key IS NULL OR NOT EXISTS (
   SELECT 1 FROM pgq.dedupe_holds h WHERE h.queue_id = $2 AND h.dedupe_key = d.dedupe_key
                                      AND h.held_until IS NULL))
AND NOT EXISTS (SELECT 1 FROM pgq.queues k
                 WHERE k.queue_id = $2 AND d.died_at + k.keep_dead <= $3))sql";
// With its dedupe period, which dead-letter kept.
constexpr std::string_view kRevived = R"sql(
SELECT r.id, $2, CASE WHEN r.group_key IS NULL THEN 'p' ELSE 'w' END, r.priority, $3, 0,
       r.max_attempts, r.enqueued_at, r.dedupe_key, r.group_key, r.last_error, r.payload,
       r.dedupe_for, r.trace_context, r.trace_links
  FROM revived r)sql";

const std::string& ReviveOne() {
  static const std::string sql =
      "WITH revived AS (DELETE FROM pgq.dead_jobs d WHERE d.id = $1 AND " +
      std::string(kDedupeFree) + " RETURNING d.*)" + std::string(internal::RevivedKeysSql());
  return sql;
}

pg::Statement& revive_job() {
  static BuiltStatement statement{
      internal::InsertJobsSql(ReviveOne(), kRevived, {}, ", dedupe_for"),
      {INT8OID, INT4OID, TIMESTAMPTZOID}};
  return statement.get();
}

// $1 queue name, $4 at most this many. Of dead jobs sharing a key, only the
// oldest comes back.
const std::string& ReviveOldestOf() {
  static const std::string sql = R"sql(
WITH revived AS (
  DELETE FROM pgq.dead_jobs dd WHERE dd.id = ANY (ARRAY(
    SELECT d.id FROM pgq.dead_jobs d WHERE d.queue = $1 AND )sql" +
                                 std::string(kDedupeFree) + R"sql(
       AND NOT EXISTS (SELECT 1 FROM pgq.dead_jobs o WHERE o.queue = d.queue
                          AND o.dedupe_key = d.dedupe_key AND o.id < d.id)
     ORDER BY d.id LIMIT $4 FOR UPDATE SKIP LOCKED))
  RETURNING dd.*))sql" + std::string(internal::RevivedKeysSql());
  return sql;
}

pg::Statement& revive_oldest() {
  static BuiltStatement statement{
      internal::InsertJobsSql(ReviveOldestOf(), kRevived, {}, ", dedupe_for"),
      {TEXTOID, INT4OID, TIMESTAMPTZOID, INT4OID}};
  return statement.get();
}

// Revived jobs whose dedupe key another live job took while they were
// revived (kDedupeFree looked before): the statement cannot undo them, so
// the transaction fails (it is retried whole).
pg::Statement keys_lost = {R"sql(
SELECT count(*) AS lost FROM pgq.job_rows j
 WHERE j.id = ANY ($1) AND j.dedupe_key IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM pgq.dedupe_holds h
                    WHERE h.queue_id = j.queue_id AND h.dedupe_key = j.dedupe_key
                      AND h.job_id = j.id AND h.held_until IS NULL))sql",
                           1,
                           {INT8ARRAYOID},
                           nullptr};

void CheckRevivedKeys(pg::SpiSession& spi, const pg::Result& revived) {
  std::vector<int64> ids;
  const int id_column = revived.ColumnNumber("id");
  for (uint64 row = 0; row < revived.size(); ++row) ids.push_back(revived.Int64(row, id_column));
  pg::Params params;
  params.Set(0, internal::Int8Array(ids));
  if (spi.Execute(keys_lost, params).Int64(0, "lost") == 0) return;
  pg::Raise(ERRCODE_T_R_SERIALIZATION_FAILURE,
            "could not retry a dead job: its dedupe key was taken meanwhile",
            "A job with its dedupe key was enqueued while it was being retried.",
            "Retry the transaction: the dead job then stays dead (dedupe_key_taken).");
}

// Ungrouped revived jobs are pending (AfterInsert); grouped ones move their
// group on.
int32 AfterRevival(pg::SpiSession& spi, const Queue& queue, const pg::Result& revived) {
  if (!revived.empty()) CheckRevivedKeys(spi, revived);
  internal::AfterInsert(spi, &queue, 1, revived);
  pg::ledger::NoteUnfinished(queue.id, static_cast<int64>(revived.size()));
  internal::MoveGroupsOn(spi, internal::GroupsOf(revived));
  return static_cast<int32>(revived.size());
}

}  // namespace

namespace {

// What a cancel of a job of pgq.job_rows does besides its move (`cancelled`:
// the dead row's queue_id and what GroupsOf and ParentsDied read).
bool AfterCancel(pg::SpiSession& spi, const pg::Result& cancelled, TimestampTz now) {
  const int32 queue_id = cancelled.Int32(0, "queue_id");
  pg::ledger::NoteLocked(queue_id);  // it may have locked a pending job
  internal::CountDead(queue_id);
  pg::ledger::NoteLeftRunning(queue_id);  // it may have been running
  internal::MoveGroupsOn(
      spi, internal::GroupsOf(cancelled, internal::KeysReleased(spi, cancelled, now)));
  internal::ParentsDied(spi, cancelled, now);
  return true;
}

// $1 id, $2 now, $3 its ring: a job still in its ring (a tombstone noted,
// its closure not yet written: pgq.ring_jobs shows it pending) into
// dead-letter, reason cancelled, as a pending job of pgq.job_rows is.
pg::Statement& bury_ring_entry() {
  const auto sql = [] {
    std::string rows(kQueueNameOfD);
    rows += R"sql(, d.payload, d.attempt, NULL, 'cancelled', $2, d.priority, d.max_attempts,
       d.enqueued_at, d.dedupe_key, d.group_key, NULL, d.dedupe_for,
       )sql";
    rows += DeadSegmentSql();
    rows += ", d.trace_context, NULL\n  FROM d";
    return InsertDeadSql(R"sql(
WITH d AS (
  SELECT r.id, q.queue_id, r.payload, r.attempt, r.priority, r.max_attempts, r.enqueued_at,
         r.group_key, r.dedupe_key, r.dedupe_for, r.trace_context
    FROM pgq.ring_jobs r JOIN pgq.queue_rings q ON q.ring_id = r.ring
   WHERE r.id = $1 AND r.ring = $3 AND r.state = 'p'))sql",
                         rows) +
           std::string(kReturnQueueId) + ",\n          id, dedupe_key, dedupe_for";
  };
  static BuiltStatement statement{sql(), {INT8OID, TIMESTAMPTZOID, INT4OID}};
  return statement.get();
}

}  // namespace

bool Cancel(pg::SpiSession& spi, const Scope& scope, int64 id, TimestampTz now) {
  // A few times at most: a ring job whose claim, or another cancel, is in
  // progress is waited for (as a table job's row lock makes the statement
  // wait), then looked for again, running or pending.
  for (int round = 0;; ++round) {
    // Running on its ring: ended there (if its holder ended it first, it
    // is looked for where that left it).
    if (pg::job_ring::Lease lease; ring::Running(spi, scope, id, &lease)) {
      if (ring::CancelRunning(spi, lease, id, now)) return true;
    }
    pg::Params params;
    params.Set(0, Int64GetDatum(id)).Set(1, TimestampTzGetDatum(now));
    internal::SetScope(params, 2, scope);
    const pg::Result cancelled = spi.Execute(cancel_job(), params);
    if (!cancelled.empty()) return AfterCancel(spi, cancelled, now);
    const pg::Result follower = spi.Execute(cancel_follower(), params);
    if (!follower.empty()) {
      internal::CountDead(follower.Int32(0, "queue_id"));
      return true;
    }
    // A job still in its ring: a tombstone, then dead-letter, then its
    // closure (the ring's readers show it pending until the closure).
    ring::TakenOut taken;
    TransactionId other = InvalidTransactionId;
    const auto outcome = ring::TakeOutPending(spi, scope, id, &taken, &other);
    if (outcome == pg::job_ring::TombstoneOutcome::kWait && round < 3) {
      ring::WaitFor(other);
      continue;
    }
    if (outcome == pg::job_ring::TombstoneOutcome::kTombstoned) {
      pg::Params bury;
      bury.Set(0, Int64GetDatum(id))
          .Set(1, TimestampTzGetDatum(now))
          .Set(2, Int32GetDatum(taken.ring_id));
      const pg::Result buried = spi.Execute(bury_ring_entry(), bury);
      ring::CloseTakenOut(taken, id, now);
      internal::CountDead(taken.queue_id);
      // A grouped one's group moves on; a keyed one's key goes (or stays
      // for its period) and its follower, if any, takes it.
      std::vector<internal::GroupRef> groups = internal::LetGroupsGo(spi, {id});
      for (internal::GroupRef& group : internal::KeysReleased(spi, buried, now)) {
        groups.push_back(std::move(group));
      }
      internal::MoveGroupsOn(spi, std::move(groups));
      // Its children die with it (dependency_failed), as a table job's.
      internal::ParentsDied(spi, ring::ParentsAmong(spi, taken.place, {id}), now);
      return true;
    }
    if (round >= 3 || !ring::WaitForClaim(spi, scope, id)) return false;
  }
}

int64 PurgeDead(pg::SpiSession& spi, std::string_view queue, TimestampTz died_before) {
  pg::Params params;
  params.Set(0, pg::TextDatum(queue)).Set(1, TimestampTzGetDatum(died_before));
  return static_cast<int64>(spi.Execute(purge_dead, params).size());
}

bool PurgeDeadJob(pg::SpiSession& spi, int32 queue_id, int64 id) {
  pg::Params params;
  params.Set(0, Int64GetDatum(id)).Set(1, Int32GetDatum(queue_id));
  return !spi.Execute(purge_dead_job, params).empty();
}

int32 QueueOfDeadJob(pg::SpiSession& spi, int64 id, TimestampTz now) {
  pg::Params params;
  params.Set(0, Int64GetDatum(id)).Set(1, TimestampTzGetDatum(now));
  const pg::Result dead = spi.Execute(queue_of_dead_job, params, 1);
  return dead.empty() ? 0 : dead.Int32(0, "queue_id");
}

int32 Revive(pg::SpiSession& spi, const Queue& queue, int64 id, TimestampTz now) {
  pg::Params params;
  params.Set(0, Int64GetDatum(id)).Set(1, Int32GetDatum(queue.id)).Set(2, TimestampTzGetDatum(now));
  return AfterRevival(spi, queue, spi.Execute(revive_job(), params));
}

int32 ReviveOldest(pg::SpiSession& spi, const Queue& queue, int32 max, TimestampTz now) {
  pg::Params params;
  params.Set(0, pg::TextDatum(queue.name))
      .Set(1, Int32GetDatum(queue.id))
      .Set(2, TimestampTzGetDatum(now))
      .Set(3, Int32GetDatum(max));
  return AfterRevival(spi, queue, spi.Execute(revive_oldest(), params));
}

namespace {

// $1 now, $2 at most this many. Dead jobs kept for good by a queue that has
// a keep_dead now leave pgq.dead_jobs_kept: into the ring of that keep if
// still within it, else nowhere. Row deletes, but only of that queue's
// rows, once, on its admin's alter_queue.
// (Dead jobs are kept unless their queue says for how long, and a job of a
// queue that is gone stays too, for good: it was never ours to drop.)
pg::Statement& move_kept_dead() {
  const auto sql = [] {
    return InsertDeadSql(R"sql(
WITH d AS (
  DELETE FROM pgq.dead_jobs_kept k WHERE k.ctid = ANY (ARRAY(
    SELECT m.ctid FROM pgq.queues q JOIN pgq.dead_jobs_kept m ON m.queue = q.name
     WHERE q.keep_dead IS NOT NULL LIMIT $2))
  RETURNING k.*))sql",
                         R"sql(
SELECT d.id, d.queue, d.payload, d.attempts, d.last_error, d.reason, d.died_at, d.priority,
       d.max_attempts, d.enqueued_at, d.dedupe_key, d.group_key, d.progress, d.dedupe_for, )sql" +
                             internal::SegmentOfKeepSql(false, "q.keep_dead") + R"sql(,
       d.trace_context, d.trace_links
  FROM d JOIN pgq.queues q ON q.name = d.queue
 WHERE d.died_at + q.keep_dead > $1)sql");
  };
  static BuiltStatement statement{sql(), {TIMESTAMPTZOID, INT4OID}};
  return statement.get();
}

}  // namespace

namespace internal {

void MoveKeptDead(pg::SpiSession& spi, TimestampTz now, int32 max) {
  pg::Params params;
  params.Set(0, TimestampTzGetDatum(now)).Set(1, Int32GetDatum(max));
  spi.Execute(move_kept_dead(), params);
}

void DeleteQueueDead(pg::SpiSession& spi, Datum queue) {
  pg::Params by_name;
  by_name.Set(0, queue);
  spi.Execute(delete_queue_dead, by_name);
}

}  // namespace internal

}  // namespace pgq::store
