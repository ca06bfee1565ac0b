// Dedupe keys past their job (SPEC §8): a key that stays taken for a period
// after its job finished (enqueue's dedupe_for), and the job that follows a
// running holder of its key (on_duplicate => 'replace').
//
// A live job holds its key through jobs_dedupe_idx, as in 1.1. When it
// leaves pgq.job_rows (done, dead or cancelled), every statement that removed it
// returns its key, and KeysReleased, in the same transaction:
//   - records the period in pgq.dedupe_holds (one row per key, overwritten
//     by the key's next job), which enqueue reads before and after its
//     insert (insert.cpp);
//   - moves the key's follower, if any, into pgq.job_rows: pending, under the
//     key, with the id its enqueue returned.
// A follower waits in pgq.dedupe_followers, outside the hot table, so that
// the running holder and it can both exist and no index of pgq.job_rows costs
// anyone more; the enqueue that adds it holds a KEY SHARE lock on the
// holder's row, so the holder cannot leave before the follower is
// committed and seen.
// A follower cancelled leaves in the statement that dead-letters it
// (dead.cpp), through CancelledFollowerSql: this file alone writes
// pgq.dedupe_followers.
#include "pg/args.h"
#include "pg/ledger.h"
#include "pg/settings.h"
#include "store/internal.h"

namespace pgq::store {

namespace {

// The rows of `moved` (followers taken out of pgq.dedupe_followers) as new
// pending jobs, for InsertJobsSql.
// One of a FIFO group comes in waiting: the caller moves its group on
// (groups.cpp), which makes it pending in its turn.
constexpr std::string_view kFollowerJob = R"sql(
SELECT m.id, m.queue_id, CASE WHEN m.group_key IS NULL THEN 'p' ELSE 'w' END, m.priority,
       m.run_at, 0, m.max_attempts, m.enqueued_at, m.dedupe_key, m.group_key, NULL, m.payload,
       m.dedupe_for
  FROM moved m)sql";

// $1 queue id, $2 key, $3 job id, $4 held until (NULL: no period); then the
// key's follower, if any, becomes a pending job holding the key.
pg::Statement& release_key() {
  static internal::BuiltStatement statement{
      internal::InsertJobsSql(R"sql(
WITH held AS (
  INSERT INTO pgq.dedupe_holds AS h (queue_id, dedupe_key, job_id, held_until)
  SELECT $1, $2, $3, $4 WHERE $4 IS NOT NULL
  ON CONFLICT (queue_id, dedupe_key) DO UPDATE
     SET job_id = excluded.job_id, held_until = excluded.held_until
), moved AS (
  DELETE FROM pgq.dedupe_followers f WHERE f.queue_id = $1 AND f.dedupe_key = $2
  RETURNING f.*
))sql",
                              kFollowerJob, {}, ", dedupe_for"),
      {INT4OID, TEXTOID, INT8OID, TIMESTAMPTZOID}};
  return statement.get();
}

// $1 queue id, $2 key, $3 now.
pg::Statement held_key = {R"sql(
SELECT job_id FROM pgq.dedupe_holds
 WHERE queue_id = $1 AND dedupe_key = $2 AND held_until > $3)sql",
                          3,
                          {INT4OID, TEXTOID, TIMESTAMPTZOID},
                          nullptr};

// $1 queue id, $2 key. Locks the running holder against leaving (KEY SHARE
// does not stop its heartbeat, which changes no key column).
pg::Statement lock_running_holder = {R"sql(
SELECT id FROM pgq.job_rows WHERE queue_id = $1 AND dedupe_key = $2 AND state = 'r'
   FOR KEY SHARE)sql",
                                     2,
                                     {INT4OID, TEXTOID},
                                     nullptr};

// $1 queue id, $2 payload, $3 run_at, $4 priority, $5 key: a holder that
// has not started: pending, behind its group's head ('w'), or waiting for
// its parents ('b', which keeps them: issue 30, D3). Its state is checked
// again on the row itself: a claim that took it meanwhile makes this update
// nothing. A pending holder whose lease expired could still be completed
// late by that claim (finish.cpp): not once it carries new work, so
// lease_until is cleared.
pg::Statement replace_holder = {R"sql(
UPDATE pgq.job_rows j SET payload = $2, run_at = $3, priority = $4, lease_until = NULL
 WHERE j.id = (SELECT c.id FROM pgq.job_rows c
                WHERE c.queue_id = $1 AND c.dedupe_key = $5 AND c.state IN ('p', 'w', 'b'))
   AND j.state IN ('p', 'w', 'b')
RETURNING j.queue_id, j.id, j.priority, j.run_at, j.state = 'p' AS pending, j.group_key)sql",
                                5,
                                {INT4OID, JSONBOID, TIMESTAMPTZOID, INT4OID, TEXTOID},
                                nullptr};

// The same parameters, then $6 max_attempts, $7 group key, $8 dedupe_for:
// the key's follower, new or replaced (a later event replaces the one
// waiting).
pg::Statement follow_holder = {
    R"sql(
INSERT INTO pgq.dedupe_followers AS f (queue_id, dedupe_key, id, priority, run_at, max_attempts,
                                       enqueued_at, dedupe_for, group_key, payload)
VALUES ($1, $5, pg_catalog.nextval('pgq.job_id_seq'), $4, $3, $6, pg_catalog.now(), $8, $7, $2)
ON CONFLICT (queue_id, dedupe_key) DO UPDATE
   SET payload = excluded.payload, run_at = excluded.run_at, priority = excluded.priority,
       group_key = excluded.group_key
RETURNING f.id)sql",
    8,
    {INT4OID, JSONBOID, TIMESTAMPTZOID, INT4OID, TEXTOID, INT4OID, TEXTOID, INTERVALOID},
    nullptr};

pg::Statement delete_job = {"DELETE FROM pgq.job_rows WHERE id = $1", 1, {INT8OID}, nullptr};

// Followers whose holder is gone (it left in a transaction that could not
// see them: a REPEATABLE READ one) become jobs all the same: a safety net
// run by maintenance (a DELETE of no row takes no transaction id).
pg::Statement& promote_orphans() {
  static internal::BuiltStatement statement{
      internal::InsertJobsSql(R"sql(
WITH moved AS (
  DELETE FROM pgq.dedupe_followers f
   WHERE NOT EXISTS (SELECT 1 FROM pgq.job_rows h
                      WHERE h.queue_id = f.queue_id AND h.dedupe_key = f.dedupe_key)
  RETURNING f.*
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
    pg::Params params;
    params.Set(0, Int32GetDatum(rows.Int32(row, queue_column)))
        .Set(1, rows.Value(row, key_column, &is_null))
        .Set(2, Int64GetDatum(rows.Int64(row, id_column)));
    if (rows.IsNull(row, period_column)) {
      params.SetNull(3);
    } else {
      const Datum period = rows.Value(row, period_column, &is_null);
      const int64 period_us = pg::IntervalMicros(DatumGetIntervalP(period), "dedupe_for");
      params.Set(3, TimestampTzGetDatum(pg::AddMicros(finished_at, period_us, "dedupe_for")));
    }
    const pg::Result moved = spi.Execute(release_key(), params);
    if (moved.empty()) continue;
    if (moved.Bool(0, "pending")) NotePendingAgain(moved, true);
    for (GroupRef& group : GroupsOf(moved)) groups.push_back(std::move(group));
  }
  return groups;
}

int64 HeldKeyJob(pg::SpiSession& spi, int32 queue_id, Datum key, TimestampTz now, bool latest) {
  pg::Params params;
  params.Set(0, Int32GetDatum(queue_id)).Set(1, key).Set(2, TimestampTzGetDatum(now));
  const pg::Result held =
      latest ? spi.ExecuteSeeingLatest(held_key, params, 1) : spi.Execute(held_key, params, 1);
  return held.empty() ? 0 : held.Int64(0, "job_id");
}

void DeleteJustInserted(pg::SpiSession& spi, int64 id) {
  pg::Params params;
  params.Set(0, Int64GetDatum(id));
  spi.Execute(delete_job, params);
}

}  // namespace internal

std::optional<int64> Replace(pg::SpiSession& spi, const Queue& queue, const NewJob& job) {
  pg::Params replace;
  const pg::Result replaced =
      spi.Execute(replace_holder, internal::SetJobParams(replace, queue, job));
  if (!replaced.empty()) {
    // Its place in the claim order moved: it may now come first.
    pg::ledger::NoteLocked(queue.id);
    internal::AfterInsert(spi, &queue, 1, replaced);
    return replaced.Int64(0, "id");
  }
  pg::Params holder;
  holder.Set(0, Int32GetDatum(queue.id)).Set(1, job.dedupe_key);
  if (spi.Execute(lock_running_holder, holder, 1).empty()) return Insert(spi, queue, job);
  pg::Params follow;
  return spi.Execute(follow_holder, internal::SetJobParams(follow, queue, job)).Int64(0, "id");
}

int64 KeyHolder(pg::SpiSession& spi, int32 queue_id, Datum dedupe_key, TimestampTz now) {
  if (const int64 live = DedupeHolder(spi, queue_id, dedupe_key); live != 0) return live;
  // As committed now: the insert that found the key taken may have seen it so.
  return internal::HeldKeyJob(spi, queue_id, dedupe_key, now, true);
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
