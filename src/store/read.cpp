// Reading jobs wherever they are (pgq.job, pgq.list_jobs): live in
// pgq.job_rows, following a running holder of their key in
// pgq.dedupe_followers, pending or running on a queue's ring
// (pgq.ring_jobs, ADR 0028), completed in pgq.job_history, dead in
// pgq.dead_jobs, as rows of pgq.job_info. Rows past their queue's
// keep_completed or keep_dead that maintenance has not dropped yet are not
// shown.
#include "pg/args.h"
#include "store/internal.h"
#include "store/ring_jobs.h"

namespace pgq::store {

namespace {

using internal::BuiltStatement;

// The five sources as one row type: the columns of pgq.job_info, then
// queue_id. `where_live`, `where_following`, `where_ring`, `where_done` and
// `where_dead` restrict each (the aliases are j, f, g, h, d, in the order
// of the union: live, following, done, dead, ring; `$STATE` is a
// source's state expression). A ring job is shown as the same job in
// pgq.job_rows would be: ready or scheduled with the attempts it has spent, or
// running with its claim's attempt and lease.
std::string JobInfoSql(std::string_view where_live, std::string_view where_following,
                       std::string_view where_ring, std::string_view where_done,
                       std::string_view where_dead, std::string_view order,
                       std::string_view ring_queues = "true") {
  constexpr std::string_view kLiveState = R"sql(
  CASE j.state WHEN 'r' THEN 'running'
               WHEN 'p' THEN CASE WHEN j.run_at > $2 THEN 'scheduled' ELSE 'ready' END
               ELSE 'waiting' END)sql";
  constexpr std::string_view kRingState = R"sql(
  CASE g.state WHEN 'r' THEN 'running'
               ELSE CASE WHEN g.run_at > $2 THEN 'scheduled' ELSE 'ready' END END)sql";
  constexpr std::string_view kDeadState =
      "CASE d.reason WHEN 'cancelled' THEN 'cancelled' ELSE 'dead' END";
  const auto with_state = [](std::string_view where, std::string_view state) {
    std::string out(where);
    for (size_t at = out.find("$STATE"); at != std::string::npos; at = out.find("$STATE", at)) {
      out.replace(at, 6, state);
    }
    return out;
  };
  if (where_ring == "false") ring_queues = "false";  // no ring read at all
  std::string sql = "(SELECT j.id, q.name AS queue,";
  sql += kLiveState;
  sql += R"sql( AS state,
        j.attempt, j.max_attempts, j.priority, j.group_key,
        j.dedupe_key, j.run_at, j.enqueued_at,
        j.claimed_at, CASE WHEN j.state = 'r' THEN j.lease_until END AS lease_until,
        NULL::timestamptz AS finished_at, j.progress, NULL::jsonb AS result, j.last_error,
        j.open_parents, j.payload, NULL::text AS dead_reason,
        pg_catalog.substr(j.trace_context, 4, 32) AS trace_id, j.trace_context, j.queue_id
   FROM pgq.job_rows j JOIN pgq.queues q ON q.queue_id = j.queue_id
  WHERE )sql";
  sql += with_state(where_live, kLiveState);
  sql += order;
  sql += R"sql()
UNION ALL
(SELECT f.id, q.name, 'waiting', 0, f.max_attempts, f.priority, NULL, f.dedupe_key, f.run_at,
        f.enqueued_at, NULL, NULL, NULL, NULL, NULL, NULL, NULL, f.payload, NULL,
        pg_catalog.substr(f.trace_context, 4, 32), f.trace_context, f.queue_id
   FROM pgq.dedupe_followers f JOIN pgq.queues q ON q.queue_id = f.queue_id
  WHERE )sql";
  sql += where_following;
  sql += order;
  sql += R"sql()
UNION ALL
(SELECT h.id, q.name, 'done', h.attempt, h.max_attempts, h.priority, h.group_key, h.dedupe_key,
        h.run_at, h.enqueued_at, h.claimed_at, NULL, h.finished_at, h.progress, h.result,
        h.last_error, NULL, h.payload, NULL, pg_catalog.substr(h.trace_context, 4, 32),
        h.trace_context, h.queue_id
   FROM pgq.job_history h JOIN pgq.queues q ON q.queue_id = h.queue_id
  WHERE h.finished_at + q.keep_completed > $2 AND )sql";
  sql += where_done;
  sql += order;
  sql += R"sql()
UNION ALL
(SELECT d.id, d.queue, )sql";
  sql += kDeadState;
  sql += R"sql(, d.attempts, d.max_attempts, d.priority, d.group_key, d.dedupe_key,
        NULL, d.enqueued_at, NULL, NULL, d.died_at, d.progress, NULL, d.last_error, NULL,
        d.payload, d.reason, pg_catalog.substr(d.trace_context, 4, 32), d.trace_context,
        q.queue_id
   FROM pgq.dead_jobs d JOIN pgq.queues q ON q.name = d.queue
  WHERE (q.keep_dead IS NULL OR d.died_at + q.keep_dead > $2) AND )sql";
  sql += with_state(where_dead, kDeadState);
  sql += order;
  // A job of a queue's ring that has not finished (pgq.ring_jobs), last
  // (each ring is read whole: no index on id; pgq.job reads them one ring
  // at a time, ReadJob).
  sql += R"sql()
UNION ALL
(SELECT g.id, q.name,)sql";
  sql += kRingState;
  sql += R"sql(, g.attempt, g.max_attempts, g.priority, g.group_key, g.dedupe_key, g.run_at,
        g.enqueued_at, g.claimed_at, g.lease_until, NULL, NULL, NULL, g.last_error, NULL, g.payload,
        NULL, pg_catalog.substr(g.trace_context, 4, 32), g.trace_context, q.queue_id
   FROM pgq.queues q CROSS JOIN LATERAL pgq.queue_ring_ids(q.queue_id) r(ring_id)
        CROSS JOIN LATERAL (SELECT * FROM pgq.ring_jobs g WHERE g.ring = r.ring_id AND )sql";
  sql += with_state(where_ring, kRingState);
  // OFFSET 0: kept a subquery, so that the equality on the ring prunes the
  // other rings' partitions as the statement runs (each ring read whole);
  // `ring_queues` says which queues' rings are read.
  sql += " OFFSET 0) g\n  WHERE ";
  sql += ring_queues;
  sql += order;
  sql += ")";
  return sql;
}

// $1 id, $2 now. A live job first, through the hot table alone: the
// history and dead-letter tables have a segment per ring of each retention
// class (ADR 0021), and a generic plan opens every one of them. Then, if
// it is not live, the caller's queues' rings (ring_job_info), then every
// other source in one statement (one snapshot: a job that finishes
// meanwhile is found where it went; a ring job moved into pgq.job_rows is
// closed on its ring in the same transaction).
pg::Statement& live_job_info() {
  static BuiltStatement statement{
      JobInfoSql("j.id = $1", "f.id = $1", "false", "false", "false", "") + "\nLIMIT 1",
      {INT8OID, TIMESTAMPTZOID}};
  return statement.get();
}

pg::Statement& job_info() {
  static BuiltStatement statement{
      JobInfoSql("j.id = $1", "f.id = $1", "false", "h.id = $1", "d.id = $1", "") + "\nLIMIT 1",
      {INT8OID, TIMESTAMPTZOID}};
  return statement.get();
}

// $3 a ring id, $4 its queue's: the job on that ring.
pg::Statement& ring_job_info() {
  static BuiltStatement statement{JobInfoSql("false", "false", "g.id = $1 AND r.ring_id = $3",
                                             "false", "false", "", "q.queue_id = $4") +
                                      "\nLIMIT 1",
                                  {INT8OID, TIMESTAMPTZOID, INT4OID, INT4OID}};
  return statement.get();
}

// $1 queue id, $2 now, $3 before id (NULL: from the newest), $4 max, $5
// state (NULL: any), $6 queue name, $7 dead reason (NULL: any; else only
// dead and cancelled jobs that died for it). Each source is cut at max before the
// merge, newest first. A state filter first skips the sources that cannot
// hold that state (a one-time test of the parameter), so that listing the
// dead jobs never walks the live ones.
constexpr std::string_view kLiveStates = R"sql(j.queue_id = $1 AND ($3 IS NULL OR j.id < $3)
    AND $7 IS NULL
    AND ($5 IS NULL OR $5 IN ('scheduled', 'ready', 'waiting', 'running'))
    AND ($5 IS NULL OR $STATE = $5))sql";
// A ring's jobs are read only for the rings of the queue (kRingQueue).
constexpr std::string_view kRingQueue = "q.queue_id = $1";
constexpr std::string_view kRingStates =
    R"sql(($3 IS NULL OR g.id < $3) AND $7 IS NULL
    AND ($5 IS NULL OR $5 IN ('scheduled', 'ready', 'running'))
    AND ($5 IS NULL OR $STATE = $5))sql";
constexpr std::string_view kFollowingStates =
    "f.queue_id = $1 AND ($3 IS NULL OR f.id < $3) AND ($5 IS NULL OR $5 = 'waiting')"
    " AND $7 IS NULL";
constexpr std::string_view kDoneStates =
    "h.queue_id = $1 AND ($3 IS NULL OR h.id < $3) AND ($5 IS NULL OR $5 = 'done')"
    " AND $7 IS NULL";
constexpr std::string_view kDeadStates = R"sql(d.queue = $6 AND ($3 IS NULL OR d.id < $3)
    AND ($5 IS NULL OR $5 IN ('dead', 'cancelled')) AND ($5 IS NULL OR $STATE = $5)
    AND ($7 IS NULL OR d.reason = $7))sql";

pg::Statement& list_jobs() {
  static BuiltStatement statement{
      "SELECT * FROM (" +
          JobInfoSql(kLiveStates, kFollowingStates, kRingStates, kDoneStates, kDeadStates,
                     "\n  ORDER BY 1 DESC LIMIT $4", kRingQueue) +
          ") AS jobs ORDER BY id DESC LIMIT $4",
      {INT4OID, TIMESTAMPTZOID, INT8OID, INT4OID, TEXTOID, TEXTOID, TEXTOID}};
  return statement.get();
}

// $1 job id, $2 now, $3 max per direction, $4 whether to look for the
// dependents it took with it. Its parents not yet settled, its children
// waiting for it, and the dependents that died with it, each with its queue
// and state as pgq.job shows them (a related job no longer kept is left
// out). A child dead-lettered by the cascade records its failed parent only
// in last_error, so those are the dead jobs of reason dependency_failed
// with that text; a child is enqueued after its parent, so only dead jobs
// with higher ids are read (dead_jobs_id_idx).
pg::Statement& related_jobs() {
  static BuiltStatement statement{
      R"sql(WITH rel AS MATERIALIZED (
(SELECT 'parent' AS direction, d.parent_id AS id FROM pgq.job_dependencies d
  WHERE d.child_id = $1 ORDER BY d.parent_id LIMIT $3)
UNION ALL
(SELECT 'child', d.child_id FROM pgq.job_dependencies d
  WHERE d.parent_id = $1 ORDER BY d.child_id LIMIT $3)
UNION ALL
(SELECT 'taken', x.id FROM pgq.dead_jobs x
  WHERE $4 AND x.id > $1 AND x.reason = 'dependency_failed'
    AND x.last_error = 'parent job ' || $1::text || ' did not complete'
  ORDER BY x.id LIMIT $3))
SELECT rel.direction, rel.id, i.queue, i.state, i.queue_id
  FROM rel JOIN ()sql" +
          JobInfoSql("j.id = ANY (ARRAY(SELECT r.id FROM rel r))",
                     "f.id = ANY (ARRAY(SELECT r.id FROM rel r))",
                     "g.id = ANY (ARRAY(SELECT r.id FROM rel r)) AND EXISTS (SELECT FROM rel)",
                     "h.id = ANY (ARRAY(SELECT r.id FROM rel r))",
                     "d.id = ANY (ARRAY(SELECT r.id FROM rel r))", "") +
          R"sql() AS i ON i.id = rel.id
 ORDER BY CASE rel.direction WHEN 'parent' THEN 0 WHEN 'child' THEN 1 ELSE 2 END, rel.id)sql",
      {INT8OID, TIMESTAMPTZOID, INT4OID, BOOLOID}};
  return statement.get();
}

// $1 key, $2 now, $3 every queue, $4 queue ids (int4[]), $5 max. Live jobs
// (and followers) whose dedupe or group key is $1, through jobs_dedupe_idx,
// jobs_group_idx and group_holds_group_idx: each needs the queue id, so
// "every queue" is the array of all of them.
constexpr std::string_view kInQueues =
    " = ANY (CASE WHEN $3 THEN ARRAY(SELECT a.queue_id FROM pgq.queues a) ELSE $4 END)";

pg::Statement& find_jobs() {
  static BuiltStatement statement{
      "SELECT * FROM (" +
          JobInfoSql(
              "(j.dedupe_key = $1 OR j.group_key = $1) AND j.queue_id" + std::string(kInQueues),
              "(f.dedupe_key = $1 OR f.group_key = $1) AND f.queue_id" + std::string(kInQueues),
              // A ring job with the group key holds a row of
              // pgq.group_holds, one with the dedupe key is named by the
              // key's row of pgq.dedupe_holds: only those queues' rings are
              // read.
              "g.id = ANY (ARRAY(SELECT h.job_id FROM pgq.group_holds h WHERE h.group_key = $1"
              " AND h.queue_id = q.queue_id UNION ALL SELECT k.job_id FROM pgq.dedupe_holds k"
              " WHERE k.dedupe_key = $1 AND k.queue_id = q.queue_id AND k.held_until IS NULL))",
              "false", "false", "\n  ORDER BY 1 DESC LIMIT $5",
              "q.queue_id = ANY (ARRAY(SELECT h.queue_id FROM pgq.group_holds h"
              " WHERE h.group_key = $1 AND h.queue_id" +
                  std::string(kInQueues) +
                  " UNION ALL SELECT k.queue_id FROM pgq.dedupe_holds k WHERE k.dedupe_key = $1"
                  " AND k.held_until IS NULL AND k.queue_id" +
                  std::string(kInQueues) + "))") +
          ") AS jobs ORDER BY id DESC LIMIT $5",
      {TEXTOID, TIMESTAMPTZOID, BOOLOID, INT4ARRAYOID, INT4OID}};
  return statement.get();
}

}  // namespace

pg::Result ReadJob(pg::SpiSession& spi, int64 id, TimestampTz now, const Scope& rings) {
  pg::Params params;
  params.Set(0, Int64GetDatum(id)).Set(1, TimestampTzGetDatum(now));
  pg::Result live = spi.Execute(live_job_info(), params, 1);
  if (!live.empty()) return live;
  // The rings of the scope's queues, one at a time (no index on id: each
  // read whole), then every other source in one statement. A job leaves a
  // ring only for those (pgq.job_rows, the history, the dead-letter), so a
  // job that leaves its ring between the two is found where it went.
  for (const ring::QueueRing& of_queue : ring::RingsIn(spi, rings)) {
    pg::Params ring = params;
    ring.Set(2, Int32GetDatum(of_queue.ring_id)).Set(3, Int32GetDatum(of_queue.queue_id));
    pg::Result found = spi.Execute(ring_job_info(), ring, 1);
    if (!found.empty()) return found;
  }
  return spi.Execute(job_info(), params, 1);
}

pg::Result ListJobs(pg::SpiSession& spi, int32 queue_id, std::string_view queue,
                    std::optional<std::string_view> state, std::optional<std::string_view> reason,
                    int32 max, std::optional<int64> before_id, TimestampTz now) {
  pg::Params params;
  params.Set(0, Int32GetDatum(queue_id))
      .Set(1, TimestampTzGetDatum(now))
      .SetOptional(2, !before_id, Int64GetDatum(before_id.value_or(0)))
      .Set(3, Int32GetDatum(max))
      .SetOptional(4, !state, state ? pg::TextDatum(*state) : static_cast<Datum>(0))
      .Set(5, pg::TextDatum(queue))
      .SetOptional(6, !reason, reason ? pg::TextDatum(*reason) : static_cast<Datum>(0));
  return spi.Execute(list_jobs(), params);
}

pg::Result RelatedJobs(pg::SpiSession& spi, int64 id, int32 max, bool taken, TimestampTz now) {
  pg::Params params;
  params.Set(0, Int64GetDatum(id))
      .Set(1, TimestampTzGetDatum(now))
      .Set(2, Int32GetDatum(max))
      .Set(3, BoolGetDatum(taken));
  return spi.Execute(related_jobs(), params);
}

pg::Result FindJobs(pg::SpiSession& spi, std::string_view key, const Scope& scope, int32 max,
                    TimestampTz now) {
  pg::Params params;
  params.Set(0, pg::TextDatum(key))
      .Set(1, TimestampTzGetDatum(now))
      .Set(2, BoolGetDatum(scope.every))
      .Set(3, scope.ids)
      .Set(4, Int32GetDatum(max));
  return spi.Execute(find_jobs(), params);
}

}  // namespace pgq::store
