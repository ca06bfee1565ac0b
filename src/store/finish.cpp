// The end of a claim: complete, complete_many, fail.
//
// Every one is a conditional write fenced by (id, attempt): a worker whose
// lease was lost to a newer claim changes nothing and is told so. Each finds
// only jobs of the caller's Scope.
//
// A job whose lease expired is made pending again by maintenance, but keeps
// its attempt number and lease_until until someone claims it again. A late
// complete from the expired claim is still accepted in that window: the work
// was done, and running it again would be the duplicate we exist to avoid.
// A late fail is accepted too (its error is kept, its backoff applies); both
// then took a pending job, which they note as locked.
#include <algorithm>
#include <memory>
#include <optional>

#include "core/backoff.h"
#include "pg/args.h"
#include "pg/invalidation.h"
#include "pg/ledger.h"
#include "pg/row_insert.h"
#include "pg/settings.h"
#include "store/internal.h"
#include "store/retention.h"
#include "store/ring_jobs.h"

extern "C" {
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "utils/array.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
}

namespace pgq::store {

namespace {

using internal::BuiltStatement;
using internal::SetScope;

// Held by the claim (id, attempt): running, or pending after its lease
// expired and before anyone claimed it again.
constexpr std::string_view kStillHeld =
    "(j.state = 'r' OR (j.state = 'p' AND j.lease_until IS NOT NULL))";

// `sql` with every $HELD replaced by kStillHeld.
std::string Held(std::string_view sql) {
  std::string out(sql);
  constexpr std::string_view kMarker = "$HELD";
  for (size_t at = out.find(kMarker); at != std::string::npos;
       at = out.find(kMarker, at + kStillHeld.size())) {
    out.replace(at, kMarker.size(), kStillHeld);
  }
  return out;
}

// The history rows of the completed jobs `d` (a relation with pgq.job_rows'
// columns) of the queues `keeping` keeps (their segments `segments`),
// finished at `now` with `result`: pgq.job_history's one column list.
std::string KeepSql(std::string_view now, std::string_view result, std::string_view keeping,
                    std::string_view segments) {
  std::string sql = R"sql(
  INSERT INTO pgq.job_history (id, queue_id, attempt, max_attempts, priority, run_at,
                               enqueued_at, claimed_at, finished_at, dedupe_key, group_key,
                               last_error, progress, result, payload, segment, trace_context)
  SELECT d.id, d.queue_id, d.attempt, d.max_attempts, d.priority, d.run_at, d.enqueued_at,
         d.claimed_at, )sql";
  sql += now;
  sql += ", d.dedupe_key, d.group_key, d.last_error, d.progress, ";
  sql += result;
  sql += ", d.payload, ";
  sql += "(";
  sql += segments;
  sql += ")[pg_catalog.array_position(";
  sql += keeping;
  sql += ", d.queue_id)], d.trace_context";
  sql += "\n    FROM d WHERE d.queue_id = ANY (";
  sql += keeping;
  sql += ")";
  return sql;
}

// The completing DELETE `where`, as a WITH clause named d that
// returns what the caller reads: the queue, group and state, and the job's
// dedupe columns (a key finishing may stay taken for a period or pass to a
// follower). With `history`, every column, and then the insert of the jobs
// of the queues in `keeping` (an int4[] parameter) into the segment of
// pgq.job_history at the same place in `segments` (an int2[] parameter),
// finished at `now` with result `result`.
std::string CompleteSql(std::string_view where, bool history, std::string_view now,
                        std::string_view result, std::string_view keeping = {},
                        std::string_view segments = {}) {
  std::string sql = "WITH d AS (\n  DELETE FROM pgq.job_rows j ";
  sql += Held(where);
  sql += history ? "\n  RETURNING j.*)"
                 : "\n  RETURNING j.queue_id, j.group_key, j.state, j.id, j.dedupe_key, "
                   "j.dedupe_for, j.has_dependents)";
  if (history) {
    sql += ",\nkept AS (\n";
    sql += KeepSql(now, result, keeping, segments);
    sql += ")";
  }
  sql += "\n";
  return sql;
}

// $1 id, $2 attempt, $3 $4 scope, $5 now, $6 result, (history) $7
// the queues that keep completed jobs, $8 their segments.
constexpr std::string_view kCompleteOne =
    "WHERE j.id = $1 AND j.attempt = $2 AND $HELD AND ($3 OR j.queue_id = ANY ($4))";

// [HistoryTarget::variant - 1]: no history kept (a plain DELETE); history.
pg::Statement& complete_job(int variant) {
  static BuiltStatement statements[2] = {
      {Held(R"sql(
DELETE FROM pgq.job_rows j
 WHERE j.id = $1 AND j.attempt = $2 AND $HELD AND ($3 OR j.queue_id = ANY ($4))
RETURNING j.queue_id, j.group_key, j.state = 'p' AS was_pending, j.id, j.dedupe_key,
          j.dedupe_for, j.has_dependents)sql"),
       {INT8OID, INT4OID, BOOLOID, INT4ARRAYOID, TIMESTAMPTZOID, JSONBOID}},
      {CompleteSql(kCompleteOne, true, "$5", "$6", "$7", "$8") + R"sql(
SELECT d.queue_id, d.group_key, d.state = 'p' AS was_pending, d.id, d.dedupe_key, d.dedupe_for,
       d.has_dependents
  FROM d)sql",
       {INT8OID, INT4OID, BOOLOID, INT4ARRAYOID, TIMESTAMPTZOID, JSONBOID, INT4ARRAYOID,
        INT2ARRAYOID}},
  };
  return statements[variant - 1].get();
}

// Returns how many it completed (completed), and per queue it finished jobs
// of: the queue (queue_id), how many (jobs), and whether it took a pending
// job (was_pending); plus one row per group whose head it removed
// (group_key, with its queue_id), and one per job with a dedupe key
// (id, dedupe_key, dedupe_for), and one per job with dependents
// (parent_id). Rows of one kind have NULL in the others' columns.
//
// Written so that its plan cannot read pgq.job_rows but by id (issue 31). The
// plan is generic and made once per backend (pg/spi.h), with the statistics
// of that moment; made while pgq.job_rows was small or empty (a queue idle
// before a burst), `j.id = c.id` and kStillHeld let the planner read every
// held job first (a hash join over job_rows_pkey, or a BitmapOr of the partial
// indexes jobs_lease_idx and jobs_ready_idx, whose predicates kStillHeld's
// two arms match) and look them up in the arrays, on every call, until the
// next ANALYZE: each complete_many then read the whole backlog. So:
//   - `j.id = ANY (ARRAY[c.id])`: an array comparison is neither hashed nor
//     merged, so no join but a nested loop over the arrays can use it;
//   - held spelled as `state <> 'w' AND state <> 'b' AND (state = 'r' OR
//     lease_until IS NOT NULL)`, the same jobs as kStillHeld (states are
//     p, r, w, b): no arm of it implies a partial index's predicate.
// What is left for pgq.job_rows is a sequential scan (disabled for our plans)
// or a lookup of each (id, attempt) in job_rows_pkey, whatever the statistics.
std::string CompleteManySql(bool history) {
  constexpr std::string_view kWhere = R"sql(
   USING ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2)) AS c(id, attempt)
   WHERE j.id = ANY (ARRAY[c.id]) AND j.attempt = c.attempt
     AND j.state <> 'w' AND j.state <> 'b' AND (j.state = 'r' OR j.lease_until IS NOT NULL)
     AND ($3 OR j.queue_id = ANY ($4)))sql";
  std::string sql = CompleteSql(kWhere, history, "$5", "NULL::jsonb", "$6", "$7");
  sql += R"sql(
SELECT (SELECT count(*) FROM d)::int4 AS completed, f.queue_id, f.jobs, f.was_pending,
       NULL::text AS group_key)sql";
  sql +=
      ", NULL::int8 AS id, NULL::text AS dedupe_key, NULL::interval AS dedupe_for,"
      " NULL::int8 AS parent_id";
  sql += R"sql(
  FROM (SELECT) AS one
  LEFT JOIN (SELECT d.queue_id, count(*)::int4 AS jobs, pg_catalog.bool_or(d.state = 'p') AS was_pending
               FROM d GROUP BY d.queue_id) f ON true
UNION ALL
SELECT NULL, g.queue_id, NULL, NULL, g.group_key)sql";
  sql += ", NULL, NULL, NULL, NULL";
  sql += R"sql(
  FROM (SELECT DISTINCT d.queue_id, d.group_key FROM d WHERE d.group_key IS NOT NULL) g)sql";
  sql += R"sql(
UNION ALL
SELECT NULL, d.queue_id, NULL, NULL, NULL, d.id, d.dedupe_key, d.dedupe_for, NULL
  FROM d WHERE d.dedupe_key IS NOT NULL
UNION ALL
SELECT NULL, d.queue_id, NULL, NULL, NULL, NULL, NULL, NULL, d.id
  FROM d WHERE d.has_dependents)sql";
  return sql;
}

// $1 ids, $2 attempts, $3 $4 scope, $5 now, (history) $6 the queues
// that keep completed jobs, $7 their segments.
pg::Statement& complete_jobs(int variant) {
  static BuiltStatement statements[2] = {
      {CompleteManySql(false), {INT8ARRAYOID, INT4ARRAYOID, BOOLOID, INT4ARRAYOID, TIMESTAMPTZOID}},
      {CompleteManySql(true),
       {INT8ARRAYOID, INT4ARRAYOID, BOOLOID, INT4ARRAYOID, TIMESTAMPTZOID, INT4ARRAYOID,
        INT2ARRAYOID}},
  };
  return statements[variant - 1].get();
}

pg::Statement backoff_of_job = {R"sql(
SELECT q.backoff_base, q.backoff_max FROM pgq.job_rows j JOIN pgq.queues q USING (queue_id)
 WHERE j.id = $1)sql",
                                1,
                                {INT8OID},
                                nullptr};

// The columns of a history row, as KeepSql lists them.
enum HistoryColumn {
  kHistoryId,
  kHistoryQueueId,
  kHistoryAttempt,
  kHistoryMaxAttempts,
  kHistoryPriority,
  kHistoryRunAt,
  kHistoryEnqueuedAt,
  kHistoryClaimedAt,
  kHistoryFinishedAt,
  kHistoryDedupeKey,
  kHistoryGroupKey,
  kHistoryLastError,
  kHistoryProgress,
  kHistoryResult,
  kHistoryPayload,
  kHistorySegment,
  kHistoryTraceContext,
  kHistoryColumns
};
constexpr const char* kHistoryColumnNames[kHistoryColumns] = {
    "id",          "queue_id",   "attempt",     "max_attempts", "priority",     "run_at",
    "enqueued_at", "claimed_at", "finished_at", "dedupe_key",   "group_key",    "last_error",
    "progress",    "result",     "payload",     "segment",      "trace_context"};

// A segment of pgq.job_history: its table (pgq.job_history_<segment>) and
// where each history column sits in it (a segment's attributes are its own:
// one made after a column of the parent was dropped has no slot for it).
struct HistoryLeaf {
  Oid relid = InvalidOid;
  int natts = 0;
  AttrNumber column[kHistoryColumns] = {};
};

// Found on first use, again after any change of a relation's definition
// (as store/catalog.h's oids).
const HistoryLeaf& HistoryLeafOf(int16 segment) {
  static HistoryLeaf leaves[internal::kKeptSegment];
  static pg::CacheEpoch probed{pg::invalidation::kAnyRelation | pg::invalidation::kSchema};
  if (!probed.Valid()) {
    const uint64 begun = probed.Begin();
    for (HistoryLeaf& leaf : leaves) leaf = HistoryLeaf{};
    probed.Mark(begun);
  }
  if (segment < 0 || segment >= internal::kKeptSegment) {
    pg::Raise(ERRCODE_INTERNAL_ERROR,
              "no segment " + std::to_string(segment) + " of pgq.job_history");
  }
  HistoryLeaf& leaf = leaves[segment];
  if (OidIsValid(leaf.relid)) return leaf;
  const std::string name = "job_history_" + std::to_string(segment);
  HistoryLeaf found = pg::Guard([&name] {
    HistoryLeaf read{};
    const Oid schema = get_namespace_oid("pgq", true);
    if (!OidIsValid(schema)) return read;
    const Oid relid = get_relname_relid(name.c_str(), schema);
    if (!OidIsValid(relid)) return read;
    HeapTuple relation = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
    if (!HeapTupleIsValid(relation)) return read;
    read.natts = reinterpret_cast<Form_pg_class>(GETSTRUCT(relation))->relnatts;
    ReleaseSysCache(relation);
    for (int c = 0; c < kHistoryColumns; ++c) {
      read.column[c] = get_attnum(relid, kHistoryColumnNames[c]);
      if (read.column[c] <= 0 || read.column[c] > read.natts) return HistoryLeaf{};
    }
    read.relid = relid;
    return read;
  });
  if (!OidIsValid(found.relid)) {
    pg::Raise(ERRCODE_INTERNAL_ERROR,
              "pgq." + name + " is missing or not a segment of pgq.job_history");
  }
  leaf = found;
  return leaf;
}

// The segment of pgq.job_history that takes the completions of `queue_id`
// (target.keeping is ordered by queue id), if the queue keeps history.
std::optional<int16> HistorySegmentOf(const internal::HistoryTarget& target, int32 queue_id) {
  // A detoast and ArrayGetNItems may raise: guarded, the callers' frames
  // hold C++ objects.
  ArrayType* keeping = nullptr;
  ArrayType* segments = nullptr;
  int n = 0, segment_count = 0;
  pg::Guard([&] {
    keeping = DatumGetArrayTypeP(target.keeping);
    segments = DatumGetArrayTypeP(target.segments);
    n = ArrayGetNItems(ARR_NDIM(keeping), ARR_DIMS(keeping));
    segment_count = ArrayGetNItems(ARR_NDIM(segments), ARR_DIMS(segments));
  });
  if (ARR_HASNULL(keeping) || ARR_HASNULL(segments) || segment_count != n) {
    pg::Raise(ERRCODE_INTERNAL_ERROR,
              "the queues that keep history and their segments do not match");
  }
  const int32* ids = reinterpret_cast<const int32*>(ARR_DATA_PTR(keeping));
  const int32* found = std::lower_bound(ids, ids + n, queue_id);
  if (found == ids + n || *found != queue_id) return std::nullopt;
  return reinterpret_cast<const int16*>(ARR_DATA_PTR(segments))[found - ids];
}

pg::Statement backoff_of_queue = {
    "SELECT q.backoff_base, q.backoff_max FROM pgq.queues q WHERE q.queue_id = $1",
    1,
    {INT4OID},
    nullptr};

pg::Statement& fail_retry() {
  static BuiltStatement statement{
      Held(R"sql(
UPDATE pgq.job_rows j SET state = 'p', run_at = $3, lease_until = NULL, last_error = $4
 WHERE j.id = $1 AND j.attempt = $2 AND j.attempt < j.max_attempts AND $HELD
   AND ($5 OR j.queue_id = ANY ($6))
RETURNING j.queue_id, j.priority, j.run_at, j.id)sql"),
      {INT8OID, INT4OID, TIMESTAMPTZOID, TEXTOID, BOOLOID, INT4ARRAYOID}};
  return statement.get();
}

constexpr std::string_view kFailDead = R"sql(
DELETE FROM pgq.job_rows WHERE id = $1 AND attempt = $2 AND state = 'r'
   AND attempt >= max_attempts AND ($5 OR queue_id = ANY ($6))
RETURNING *)sql";

pg::Statement& fail_dead() {
  static BuiltStatement statement{
      internal::BurySql(kFailDead, "$3", "exhausted", "$4"),
      {INT8OID, INT4OID, TEXTOID, TIMESTAMPTZOID, BOOLOID, INT4ARRAYOID}};
  return statement.get();
}

pg::Statement pending_run_at = {
    "SELECT run_at FROM pgq.job_rows WHERE id = $1 AND state = 'p'", 1, {INT8OID}, nullptr};

int64 RetryDelay(const pg::Result& queue, int32 attempt) {
  if (queue.empty()) return 0;  // gone: the writes will say 'lost'
  bool is_null = false;
  const core::BackoffPolicy policy{
      pg::IntervalMicros(DatumGetIntervalP(queue.Value(0, "backoff_base", &is_null)),
                         "backoff_base"),
      pg::IntervalMicros(DatumGetIntervalP(queue.Value(0, "backoff_max", &is_null)),
                         "backoff_max")};
  return core::BackoffDelay(policy, attempt, pg_prng_double(&pg_global_prng_state));
}

int64 NextRetryDelay(pg::SpiSession& spi, int64 id, int32 attempt) {
  pg::Params params;
  params.Set(0, Int64GetDatum(id));
  return RetryDelay(spi.Execute(backoff_of_job, params, 1), attempt);
}

int64 RetryDelayOfQueue(pg::SpiSession& spi, int32 queue_id, int32 attempt) {
  pg::Params params;
  params.Set(0, Int32GetDatum(queue_id));
  return RetryDelay(spi.Execute(backoff_of_queue, params, 1), attempt);
}

}  // namespace

namespace internal {

void NotePendingAgain(const pg::Result& rows, bool wake) {
  pg::ledger::NotePending(rows.Int32(0, "queue_id"), ClaimKeyOf(rows, 0), wake);
}

void KeepRingHistory(pg::SpiSession& spi, int32 queue_id, const std::vector<RingCompletion>& kept,
                     Datum result, TimestampTz now) {
  if (kept.empty()) return;
  const HistoryTarget& target = CompletionTarget(spi);
  if (target.variant != 2) return;  // no queue keeps history (any more)
  const std::optional<int16> segment = HistorySegmentOf(target, queue_id);
  if (!segment) return;  // not this queue (any more)
  // KeepSql's row, written into the segment's table without a statement
  // (an INSERT through the partitioned parent cost a plan's set-up and the
  // routing of each execution: half of a history-keeping claim+complete).
  const HistoryLeaf& leaf = HistoryLeafOf(*segment);
  std::vector<Datum> values(static_cast<size_t>(leaf.natts));
  std::unique_ptr<bool[]> nulls(new bool[static_cast<size_t>(leaf.natts)]);
  auto set = [&](HistoryColumn column, Datum value) {
    values[leaf.column[column] - 1] = value;
    nulls[leaf.column[column] - 1] = false;
  };
  pg::RowInserter inserter(leaf.relid);
  for (const RingCompletion& job : kept) {
    std::fill(nulls.get(), nulls.get() + leaf.natts, true);
    set(kHistoryId, Int64GetDatum(job.entry.id));
    set(kHistoryQueueId, Int32GetDatum(queue_id));
    set(kHistoryAttempt, Int32GetDatum(job.attempt));
    set(kHistoryMaxAttempts, Int32GetDatum(job.entry.max_attempts));
    set(kHistoryPriority, Int32GetDatum(job.entry.priority));
    set(kHistoryRunAt, TimestampTzGetDatum(job.entry.run_at));
    set(kHistoryEnqueuedAt, TimestampTzGetDatum(job.entry.enqueued_at));
    set(kHistoryClaimedAt, TimestampTzGetDatum(job.claimed_at));
    set(kHistoryFinishedAt, TimestampTzGetDatum(now));
    if (result != 0) set(kHistoryResult, result);
    set(kHistoryPayload, job.entry.payload);
    if (job.entry.group_key != 0) set(kHistoryGroupKey, job.entry.group_key);
    if (job.entry.dedupe_key != 0) set(kHistoryDedupeKey, job.entry.dedupe_key);
    if (job.entry.last_error != 0) set(kHistoryLastError, job.entry.last_error);
    set(kHistorySegment, Int16GetDatum(*segment));
    if (job.entry.trace_context != 0) set(kHistoryTraceContext, job.entry.trace_context);
    inserter.Insert(values.data(), nulls.get());
  }
}

}  // namespace internal

bool Complete(pg::SpiSession& spi, const Scope& scope, int64 id, int32 attempt, Datum result,
              TimestampTz now) {
  if (pg::job_ring::Lease lease; ring::Running(spi, scope, id, &lease)) {
    // Not held on the ring: maybe moved into pgq.job_rows meanwhile
    // (ring_jobs.h Running).
    if (ring::Complete(spi, lease, id, attempt, result, now)) return true;
  }
  pg::Params params;
  params.Set(0, Int64GetDatum(id)).Set(1, Int32GetDatum(attempt));
  SetScope(params, 2, scope);
  params.Set(4, TimestampTzGetDatum(now)).SetOptional(5, result == 0, result);
  const internal::HistoryTarget& history = internal::CompletionTarget(spi);
  if (history.variant == 2) params.Set(6, history.keeping).Set(7, history.segments);
  const int variant = history.variant;  // read once: later statements may refresh it
  const pg::Result completed = spi.Execute(complete_job(variant), params);
  if (completed.empty()) return false;
  const int32 queue_id = completed.Int32(0, "queue_id");
  if (completed.Bool(0, "was_pending")) pg::ledger::NoteLocked(queue_id);
  pg::ledger::NoteLeftRunning(queue_id);
  // A follower of the job's key, and its dependents made ready, join their
  // groups before the groups move on (keys.cpp, dependencies.cpp): all in
  // one call. Most jobs have none of these: nothing to do.
  std::vector<internal::GroupRef> joining = internal::KeysReleased(spi, completed, now);
  if (completed.Bool(0, "has_dependents")) {
    for (internal::GroupRef& group : internal::ParentsDone(spi, {id}, now)) {
      joining.push_back(std::move(group));
    }
  }
  if (!completed.IsNull(0, "group_key") || !joining.empty()) {
    internal::MoveGroupsOn(spi, internal::GroupsOf(completed, std::move(joining)));
  }
  internal::CountFinished(spi, queue_id, 1);
  return true;
}

int32 CompleteMany(pg::SpiSession& spi, const Scope& scope, Datum ids, Datum attempts,
                   TimestampTz now) {
  int32 on_rings = 0;
  ring::EnsureLanes(spi);  // after a start: before the leases are asked for
  if (pg::job_ring::AnyLeases()) {
    ArrayType* id_array = pg::Guard([&] { return DatumGetArrayTypeP(ids); });
    ArrayType* attempt_array = pg::Guard([&] { return DatumGetArrayTypeP(attempts); });
    const int count =
        pg::Guard([&] { return ArrayGetNItems(ARR_NDIM(id_array), ARR_DIMS(id_array)); });
    const int64* id_values = reinterpret_cast<const int64*>(ARR_DATA_PTR(id_array));
    const int32* attempt_values = reinterpret_cast<const int32*>(ARR_DATA_PTR(attempt_array));
    bool all_on_rings = count > 0;
    // The ring jobs of each queue, completed in one insert of closures.
    struct RingJob {
      int64 id;
      int32 attempt;
      pg::job_ring::Lease lease;
    };
    std::vector<RingJob> ring_jobs;
    for (int i = 0; i < count; ++i) {
      pg::job_ring::Lease lease;
      if (!ring::Running(spi, scope, id_values[i], &lease)) {
        all_on_rings = false;
        continue;
      }
      ring_jobs.push_back({id_values[i], attempt_values[i], lease});
    }
    std::stable_sort(ring_jobs.begin(), ring_jobs.end(), [](const RingJob& a, const RingJob& b) {
      return a.lease.queue_id < b.lease.queue_id;
    });
    for (size_t from = 0; from < ring_jobs.size();) {
      const int32 queue_id = ring_jobs[from].lease.queue_id;
      std::vector<int64> queue_ids;
      std::vector<int32> queue_attempts;
      std::vector<pg::job_ring::Lease> queue_leases;
      size_t to = from;
      for (; to < ring_jobs.size() && ring_jobs[to].lease.queue_id == queue_id; ++to) {
        queue_ids.push_back(ring_jobs[to].id);
        queue_attempts.push_back(ring_jobs[to].attempt);
        queue_leases.push_back(ring_jobs[to].lease);
      }
      on_rings += ring::CompleteMany(spi, queue_id, queue_ids.data(), queue_attempts.data(),
                                     queue_leases.data(), static_cast<int>(queue_ids.size()), now);
      from = to;
    }
    // One not held on its ring may have been moved into pgq.job_rows
    // meanwhile (ring_jobs.h Running): the statement below looks there (the
    // jobs completed on the rings have no row).
    if (all_on_rings && on_rings == static_cast<int32>(ring_jobs.size())) return on_rings;
  }
  pg::Params params;
  params.Set(0, ids).Set(1, attempts);
  SetScope(params, 2, scope);
  params.Set(4, TimestampTzGetDatum(now));
  const internal::HistoryTarget& history = internal::CompletionTarget(spi);
  if (history.variant == 2) params.Set(5, history.keeping).Set(6, history.segments);
  const int variant = history.variant;  // read once: later statements may refresh it
  const pg::Result result = spi.Execute(complete_jobs(variant), params);
  const int completed_column = result.ColumnNumber("completed");
  const int queue_column = result.ColumnNumber("queue_id");
  const int jobs_column = result.ColumnNumber("jobs");
  int32 completed = 0;
  for (uint64 row = 0; row < result.size(); ++row) {
    if (result.IsNull(row, completed_column)) continue;  // a group's or a key's row
    completed = result.Int32(row, completed_column);
    if (result.IsNull(row, queue_column)) continue;  // none completed
    const int32 queue_id = result.Int32(row, queue_column);
    if (result.Bool(row, "was_pending")) pg::ledger::NoteLocked(queue_id);
    pg::ledger::NoteLeftRunning(queue_id);
    internal::CountFinished(spi, queue_id, result.Int32(row, jobs_column));
  }
  std::vector<internal::GroupRef> joining = internal::KeysReleased(spi, result, now);
  {
    std::vector<int64> parents;
    const int parent_column = result.ColumnNumber("parent_id");
    for (uint64 row = 0; row < result.size(); ++row) {
      if (!result.IsNull(row, parent_column)) parents.push_back(result.Int64(row, parent_column));
    }
    for (internal::GroupRef& group : internal::ParentsDone(spi, parents, now)) {
      joining.push_back(std::move(group));
    }
  }
  internal::MoveGroupsOn(spi, internal::GroupsOf(result, std::move(joining)));
  return completed + on_rings;
}

FailOutcome Fail(pg::SpiSession& spi, const Scope& scope, int64 id, int32 attempt, Datum error,
                 std::optional<int64> retry_in_us, TimestampTz now) {
  if (pg::job_ring::Lease lease; ring::Running(spi, scope, id, &lease)) {
    const int64 delay_us =
        retry_in_us ? *retry_in_us : RetryDelayOfQueue(spi, lease.queue_id, attempt);
    const FailOutcome outcome = ring::Fail(spi, lease, id, attempt, error, delay_us, now);
    if (outcome != FailOutcome::kLost) return outcome;
    // Not held on the ring: maybe moved into pgq.job_rows meanwhile.
  }
  const int64 delay_us = retry_in_us ? *retry_in_us : NextRetryDelay(spi, id, attempt);
  pg::Params retry;
  retry.Set(0, Int64GetDatum(id))
      .Set(1, Int32GetDatum(attempt))
      .Set(2, TimestampTzGetDatum(pg::AddMicros(now, delay_us, "retry_in")))
      .SetOptional(3, error == 0, error);
  SetScope(retry, 4, scope);
  if (const pg::Result retried = spi.Execute(fail_retry(), retry); retried.size() == 1) {
    const int32 queue_id = retried.Int32(0, "queue_id");
    pg::ledger::NoteCount(queue_id, pg::kFailures, 1);
    pg::ledger::NoteLeftRunning(queue_id);
    // Due later: no wake-up now, but the claim hint must still come back to
    // it (it may come before jobs already passed, core/claim_hint.h).
    internal::NotePendingAgain(retried, delay_us == 0);
    pg::ledger::NoteLocked(queue_id);  // it may have locked a pending job
    return FailOutcome::kRetry;
  }
  pg::Params dead;
  dead.Set(0, Int64GetDatum(id))
      .Set(1, Int32GetDatum(attempt))
      .SetOptional(2, error == 0, error)
      .Set(3, TimestampTzGetDatum(now));
  SetScope(dead, 4, scope);
  const pg::Result buried = spi.Execute(fail_dead(), dead);
  if (buried.size() != 1) return FailOutcome::kLost;
  const int32 queue_id = buried.Int32(0, "queue_id");
  pg::ledger::NoteCount(queue_id, pg::kFailures, 1);
  internal::CountDead(queue_id);
  pg::ledger::NoteLeftRunning(queue_id);
  internal::MoveGroupsOn(spi, internal::GroupsOf(buried, internal::KeysReleased(spi, buried, now)));
  internal::ParentsDied(spi, buried, now);
  return FailOutcome::kDead;
}

TimestampTz PendingRunAt(pg::SpiSession& spi, int64 id) {
  pg::Params params;
  params.Set(0, Int64GetDatum(id));
  const pg::Result job = spi.Execute(pending_run_at, params, 1);
  if (job.empty()) return 0;
  bool is_null = false;
  return DatumGetTimestampTz(job.Value(0, "run_at", &is_null));
}

}  // namespace pgq::store
