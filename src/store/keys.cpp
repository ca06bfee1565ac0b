// Dedupe keys (SPEC §3, §8; ADR 0028 "Dedupe keys on the rings"):
// pgq.dedupe_holds is the one place a key is taken. An enqueue with a key
// inserts the key's row first (TakeKey; ON CONFLICT: taken), with the id
// its job will have, then puts the job on the queue's ring or into
// pgq.job_rows; a live job's row has no held_until. When the job ends
// (done, dead or cancelled, on its ring or as a row), KeyReleased, in the
// same transaction:
//   - deletes the row, or keeps it for the job's dedupe_for (held_until);
//   - moves the key's follower, if any, into pgq.job_rows: pending, under
//     the key, with the id its enqueue returned, the key's row now its.
// A job requeued (a retry, a release, an expired lease) keeps its key.
// A follower waits in pgq.dedupe_followers, outside the jobs' storage, so
// that the running holder and it can both exist; the enqueue that adds it
// holds a share lock on the key's row, so the holder's end (which deletes
// or updates that row) waits for it to commit, and the statement after,
// under a new snapshot, sees the follower and moves it.
// A follower cancelled leaves in the statement that dead-letters it
// (dead.cpp), through CancelledFollowerSql: this file alone writes
// pgq.dedupe_followers and pgq.dedupe_holds.
#include "pg/args.h"
#include "pg/ledger.h"
#include "pg/settings.h"
#include "store/internal.h"
#include "store/ring_jobs.h"

extern "C" {
#include "access/xact.h"
}

namespace pgq::store {

namespace {

// The rows of `moved` (followers taken out of pgq.dedupe_followers) as new
// pending jobs, for InsertJobsSql.
// One of a FIFO group comes in waiting: the caller moves its group on
// (groups.cpp), which makes it pending in its turn.
constexpr std::string_view kFollowerJob = R"sql(
SELECT m.id, m.queue_id, CASE WHEN m.group_key IS NULL THEN 'p' ELSE 'w' END, m.priority,
       m.run_at, 0, m.max_attempts, m.enqueued_at, m.dedupe_key, m.group_key, NULL, m.payload,
       m.dedupe_for, m.trace_context, NULL
  FROM moved m)sql";

// $1 queue id, $2 key: the key's follower, if any, becomes a pending job
// holding the key (its row of pgq.dedupe_holds, which the holder's end has
// just deleted or kept for a period, is the follower's from now on).
pg::Statement& move_follower() {
  static internal::BuiltStatement statement{
      internal::InsertJobsSql(R"sql(
WITH moved AS (
  DELETE FROM pgq.dedupe_followers f WHERE f.queue_id = $1 AND f.dedupe_key = $2
  RETURNING f.*
), held AS (
  INSERT INTO pgq.dedupe_holds AS h (queue_id, dedupe_key, job_id)
  SELECT m.queue_id, m.dedupe_key, m.id FROM moved m
  ON CONFLICT (queue_id, dedupe_key) DO UPDATE SET job_id = excluded.job_id, held_until = NULL
))sql",
                              kFollowerJob, {}, ", dedupe_for"),
      {INT4OID, TEXTOID}};
  return statement.get();
}

// $1 queue id, $2 key, $3 the job that leaves; $4 until when its key stays
// taken (keep_key). Nothing if the key is not the job's.
pg::Statement drop_key = {R"sql(
DELETE FROM pgq.dedupe_holds WHERE queue_id = $1 AND dedupe_key = $2 AND job_id = $3
RETURNING job_id)sql",
                          3,
                          {INT4OID, TEXTOID, INT8OID},
                          nullptr};
pg::Statement keep_key = {R"sql(
UPDATE pgq.dedupe_holds SET held_until = $4
 WHERE queue_id = $1 AND dedupe_key = $2 AND job_id = $3
RETURNING job_id)sql",
                          4,
                          {INT4OID, TEXTOID, INT8OID, TIMESTAMPTZOID},
                          nullptr};

// $1 queue id, $2 key: the key for a new job, whose id it draws.
pg::Statement take_key = {R"sql(
INSERT INTO pgq.dedupe_holds (queue_id, dedupe_key, job_id)
VALUES ($1, $2, pg_catalog.nextval('pgq.job_id_seq'))
ON CONFLICT (queue_id, dedupe_key) DO NOTHING
RETURNING job_id)sql",
                          2,
                          {INT4OID, TEXTOID},
                          nullptr};
// The same, $3 now, over a finished job's period that is past.
pg::Statement take_lapsed_key = {R"sql(
UPDATE pgq.dedupe_holds SET job_id = pg_catalog.nextval('pgq.job_id_seq'), held_until = NULL
 WHERE queue_id = $1 AND dedupe_key = $2 AND held_until <= $3
RETURNING job_id)sql",
                                 3,
                                 {INT4OID, TEXTOID, TIMESTAMPTZOID},
                                 nullptr};

// $1 queue id, $2 key, $3 now: who holds it (live, or finished within its
// period).
pg::Statement key_holder = {R"sql(
SELECT job_id, held_until IS NULL AS live FROM pgq.dedupe_holds
 WHERE queue_id = $1 AND dedupe_key = $2 AND (held_until IS NULL OR held_until > $3))sql",
                            3,
                            {INT4OID, TEXTOID, TIMESTAMPTZOID},
                            nullptr};

// $1 queue id, $2 key: the live holder, its row locked against its end
// until this transaction ends (a share lock: a row of the key's that is
// only locked makes no REPEATABLE READ end fail).
pg::Statement lock_live_holder = {R"sql(
SELECT job_id FROM pgq.dedupe_holds
 WHERE queue_id = $1 AND dedupe_key = $2 AND held_until IS NULL
   FOR SHARE)sql",
                                  2,
                                  {INT4OID, TEXTOID},
                                  nullptr};

// $1 queue id, $2 payload, $3 run_at, $4 priority, $5 key: a holder that
// has not started: pending, behind its group's head ('w'), or waiting for
// its parents ('b', which keeps them: issue 30, D3). Its state is checked
// again on the row itself: a claim that took it meanwhile makes this update
// nothing. A pending holder whose lease expired could still be completed
// late by that claim (finish.cpp): not once it carries new work, so
// lease_until is cleared. The new work brings its own trace context ($12,
// SetJobParams; $6-$11 unused).
pg::Statement replace_holder = {R"sql(
UPDATE pgq.job_rows j SET payload = $2, run_at = $3, priority = $4, lease_until = NULL,
                          trace_context = $12
 WHERE j.id = (SELECT c.id FROM pgq.job_rows c
                WHERE c.queue_id = $1 AND c.dedupe_key = $5 AND c.state IN ('p', 'w', 'b'))
   AND j.state IN ('p', 'w', 'b')
RETURNING j.queue_id, j.id, j.priority, j.run_at, j.state = 'p' AS pending, j.group_key)sql",
                                12,
                                {INT4OID, JSONBOID, TIMESTAMPTZOID, INT4OID, TEXTOID, INT4OID,
                                 TEXTOID, INTERVALOID, INT4OID, INT4OID, INT4OID, TEXTOID},
                                nullptr};

// $1 a job id: whether it is a row of pgq.job_rows.
pg::Statement holder_row = {"SELECT 1 FROM pgq.job_rows WHERE id = $1", 1, {INT8OID}, nullptr};

// The same parameters, then $6 max_attempts, $7 group key, $8 dedupe_for,
// $12 the trace context: the key's follower, new or replaced (a later event replaces the one
// waiting); `added`: a new one (its row version is the insert's own, no
// xmax), one more unfinished job of the queue.
pg::Statement follow_holder = {
    R"sql(
INSERT INTO pgq.dedupe_followers AS f (queue_id, dedupe_key, id, priority, run_at, max_attempts,
                                       enqueued_at, dedupe_for, group_key, payload,
                                       trace_context)
VALUES ($1, $5, pg_catalog.nextval('pgq.job_id_seq'), $4, $3, $6, pg_catalog.now(), $8, $7, $2,
        $12)
ON CONFLICT (queue_id, dedupe_key) DO UPDATE
   SET payload = excluded.payload, run_at = excluded.run_at, priority = excluded.priority,
       group_key = excluded.group_key, trace_context = excluded.trace_context
RETURNING f.id, f.xmax = 0 AS added)sql",
    12,
    {INT4OID, JSONBOID, TIMESTAMPTZOID, INT4OID, TEXTOID, INT4OID, TEXTOID, INTERVALOID, INT4OID,
     INT4OID, INT4OID, TEXTOID},
    nullptr};

// Followers whose holder is gone (it left in a transaction that could not
// see them: a REPEATABLE READ one) become jobs all the same, their keys'
// rows theirs: a safety net run by maintenance (a DELETE of no row takes no
// transaction id).
pg::Statement& promote_orphans() {
  static internal::BuiltStatement statement{
      internal::InsertJobsSql(R"sql(
WITH moved AS (
  DELETE FROM pgq.dedupe_followers f
   WHERE NOT EXISTS (SELECT 1 FROM pgq.dedupe_holds h
                      WHERE h.queue_id = f.queue_id AND h.dedupe_key = f.dedupe_key
                        AND h.held_until IS NULL)
  RETURNING f.*
), held AS (
  INSERT INTO pgq.dedupe_holds AS h (queue_id, dedupe_key, job_id)
  SELECT m.queue_id, m.dedupe_key, m.id FROM moved m
  ON CONFLICT (queue_id, dedupe_key) DO UPDATE SET job_id = excluded.job_id, held_until = NULL
))sql",
                              kFollowerJob, {}, ", dedupe_for"),
      {}};
  return statement.get();
}

pg::Statement drop_expired_holds = {R"sql(
DELETE FROM pgq.dedupe_holds WHERE ctid = ANY (ARRAY(
  SELECT ctid FROM pgq.dedupe_holds WHERE held_until <= $1 LIMIT $2)))sql",
                                    2,
                                    {TIMESTAMPTZOID, INT4OID},
                                    nullptr};

}  // namespace

namespace internal {

std::string_view CancelledFollowerSql() {
  return R"sql(
  DELETE FROM pgq.dedupe_followers f WHERE f.id = $1 AND ($3 OR f.queue_id = ANY ($4))
  RETURNING f.*
)sql";
}

std::string_view RevivedKeysSql() {
  return R"sql(, keyed AS (
  INSERT INTO pgq.dedupe_holds AS h (queue_id, dedupe_key, job_id)
  SELECT $2, r.dedupe_key, r.id FROM revived r WHERE r.dedupe_key IS NOT NULL
  ON CONFLICT (queue_id, dedupe_key) DO UPDATE SET job_id = excluded.job_id, held_until = NULL
   WHERE h.held_until IS NOT NULL
))sql";
}

int64 TakeKey(pg::SpiSession& spi, const Queue& queue, Datum key, TimestampTz now) {
  pg::Params params;
  params.Set(0, Int32GetDatum(queue.id)).Set(1, key);
  // A REPEATABLE READ (or SERIALIZABLE) transaction's insert fails when
  // the key's row was written after its snapshot (ON CONFLICT cannot decide
  // on a row it does not see): looked at first as committed now, a key
  // taken meanwhile is answered as taken, as under READ COMMITTED.
  if (IsolationUsesXactSnapshot()) {
    params.Set(2, TimestampTzGetDatum(now));
    if (!spi.ExecuteSeeingLatest(key_holder, params, 1).empty()) return 0;
  }
  const pg::Result taken = spi.Execute(take_key, params, 1);
  if (!taken.empty()) return taken.Int64(0, "job_id");
  // Only a queue that ever had a job with a dedupe period keeps keys past
  // their job (the flag is committed before any such job can finish).
  if (!queue.dedupe_periods) return 0;
  params.Set(2, TimestampTzGetDatum(now));
  const pg::Result lapsed = spi.Execute(take_lapsed_key, params, 1);
  return lapsed.empty() ? 0 : lapsed.Int64(0, "job_id");
}

std::vector<GroupRef> KeyReleased(pg::SpiSession& spi, int32 queue_id, Datum key, int64 id,
                                  Datum dedupe_for, TimestampTz finished_at) {
  pg::Params params;
  params.Set(0, Int32GetDatum(queue_id)).Set(1, key).Set(2, Int64GetDatum(id));
  // Waits for an enqueue adding a follower (its share lock on the row).
  bool held = false;
  if (dedupe_for == 0) {
    held = !spi.Execute(drop_key, params, 1).empty();
  } else {
    const int64 period_us = pg::IntervalMicros(DatumGetIntervalP(dedupe_for), "dedupe_for");
    params.Set(3, TimestampTzGetDatum(pg::AddMicros(finished_at, period_us, "dedupe_for")));
    held = !spi.Execute(keep_key, params, 1).empty();
  }
  // Not its key (any more): a follower waits for its holder, not for it.
  if (!held) return {};
  // A new statement: it sees the follower an enqueue committed meanwhile.
  pg::Params key_params;
  key_params.Set(0, Int32GetDatum(queue_id)).Set(1, key);
  const pg::Result moved = spi.Execute(move_follower(), key_params);
  if (moved.empty()) return {};
  if (moved.Bool(0, "pending")) NotePendingAgain(moved, true);
  return GroupsOf(moved);
}

std::vector<GroupRef> KeysReleased(pg::SpiSession& spi, const pg::Result& rows,
                                   TimestampTz finished_at) {
  std::vector<GroupRef> groups;
  if (rows.empty()) return groups;
  // Most finished jobs have no key: looked at before anything else.
  const int key_column = rows.ColumnNumber("dedupe_key");
  uint64 first = 0;
  while (first < rows.size() && rows.IsNull(first, key_column)) ++first;
  if (first == rows.size()) return groups;
  const int period_column = rows.ColumnNumber("dedupe_for");
  const int queue_column = rows.ColumnNumber("queue_id");
  const int id_column = rows.ColumnNumber("id");
  for (uint64 row = first; row < rows.size(); ++row) {
    if (rows.IsNull(row, key_column)) continue;
    bool is_null = false;
    const Datum key = rows.Value(row, key_column, &is_null);
    const Datum period =
        rows.IsNull(row, period_column) ? 0 : rows.Value(row, period_column, &is_null);
    for (GroupRef& group : KeyReleased(spi, rows.Int32(row, queue_column), key,
                                       rows.Int64(row, id_column), period, finished_at)) {
      groups.push_back(std::move(group));
    }
  }
  return groups;
}

}  // namespace internal

std::optional<int64> Replace(pg::SpiSession& spi, const Queue& queue, const NewJob& job) {
  // The live holder's row locked first: it cannot end (nor its key pass to
  // another job) until this transaction does.
  pg::Params holder_params;
  holder_params.Set(0, Int32GetDatum(queue.id)).Set(1, job.dedupe_key);
  const pg::Result live = spi.Execute(lock_live_holder, holder_params, 1);
  if (live.empty()) return Insert(spi, queue, job);
  const int64 holder = live.Int64(0, "job_id");
  pg::Params replace;
  const pg::Result replaced =
      spi.Execute(replace_holder, internal::SetJobParams(replace, queue, job));
  if (!replaced.empty()) {
    // Its place in the claim order moved: it may now come first.
    pg::ledger::NoteLocked(queue.id);
    internal::AfterInsert(spi, &queue, 1, replaced);
    return replaced.Int64(0, "id");
  }
  // Pending on the queue's ring: taken out, and a row of pgq.job_rows with
  // the new work under its id (ring_jobs.cpp). A row holder not replaced
  // above runs: the ring is not read for it.
  pg::Params row_params;
  row_params.Set(0, Int64GetDatum(holder));
  if (spi.Execute(holder_row, row_params, 1).empty() &&
      ring::ReplacePending(spi, queue, holder, job)) {
    return holder;
  }
  pg::Params follow;
  const pg::Result follower =
      spi.Execute(follow_holder, internal::SetJobParams(follow, queue, job));
  if (follower.Bool(0, "added")) pg::ledger::NoteUnfinished(queue.id, 1);
  return follower.Int64(0, "id");
}

int64 KeyHolder(pg::SpiSession& spi, int32 queue_id, Datum dedupe_key, TimestampTz now,
                bool live_only) {
  pg::Params params;
  params.Set(0, Int32GetDatum(queue_id)).Set(1, dedupe_key).Set(2, TimestampTzGetDatum(now));
  // As committed now: the enqueue that found the key taken may have seen it
  // so after its snapshot.
  const pg::Result held = spi.ExecuteSeeingLatest(key_holder, params, 1);
  if (held.empty() || (live_only && !held.Bool(0, "live"))) return 0;
  return held.Int64(0, "job_id");
}

KeyUpkeep TendKeys(pg::SpiSession& spi, TimestampTz now, int32 batch) {
  KeyUpkeep done{};
  pg::Params none;
  const pg::Result promoted = spi.Execute(promote_orphans(), none);
  if (!promoted.empty()) pg::ledger::NoteReadyInDatabase();
  internal::MoveGroupsOn(spi, internal::GroupsOf(promoted));
  done.followers_promoted = static_cast<int64>(promoted.size());
  pg::Params params;
  params.Set(0, TimestampTzGetDatum(now)).Set(1, Int32GetDatum(batch));
  done.holds_dropped = static_cast<int64>(spi.Execute(drop_expired_holds, params).size());
  return done;
}

}  // namespace pgq::store
