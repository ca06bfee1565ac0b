// A queue's jobs as a whole: counted before a drop, purged by a forced one,
// and the gauges of pgq.metrics().
#include <algorithm>
#include <cmath>
#include <iterator>

#include "pg/row_estimate.h"
#include "store/catalog.h"
#include "store/internal.h"
#include "store/ring_jobs.h"

namespace pgq::store {

namespace {

pg::Statement queue_holds_jobs = {R"sql(
SELECT (SELECT count(*) FROM pgq.job_rows WHERE queue_id = $1)
     + (SELECT count(*) FROM pgq.dead_jobs WHERE queue = $2) AS jobs)sql",
                                  2,
                                  {INT4OID, TEXTOID},
                                  nullptr};

// The jobs that had dependents (in other queues too) die to them.
pg::Statement delete_queue_parents = {R"sql(
WITH d AS (DELETE FROM pgq.job_rows WHERE queue_id = $1 RETURNING id, has_dependents)
SELECT id FROM d WHERE has_dependents)sql",
                                      1,
                                      {INT4OID},
                                      nullptr};

// The unfinished jobs of the queue's rings that children wait for (the
// queue is being dropped: its lock held exclusively, so no child is being
// added to them). A full read of its rings, each pruned by its LATERAL
// equality (OFFSET 0 keeps it a subquery).
pg::Statement ring_parents_of_queue = {R"sql(
SELECT r.id FROM pgq.queue_ring_ids($1) q(ring_id)
       CROSS JOIN LATERAL (SELECT * FROM pgq.ring_jobs g WHERE g.ring = q.ring_id OFFSET 0) r
 WHERE EXISTS (SELECT 1 FROM pgq.job_dependencies d WHERE d.parent_id = r.id))sql",
                                       1,
                                       {INT4OID},
                                       nullptr};

// The dashboard's overview (pgq.queue_overview): per queue of the scope,
// each count made through an index and stopped at $1 rows, so a request
// costs the same with a million jobs as with a thousand. $2 now; $3, $4 the
// scope. The pending jobs are read in claim order; the oldest ready job is
// found per priority level (the first entry of each level is its oldest),
// through at most 64 levels. A queue's ring (ADR 0028) is counted apart,
// from its lane and the lease map (pg/job_ring.h CountPending,
// CountRunning), as boundedly.
pg::Statement queue_overview = {R"sql(
SELECT q.queue_id, q.name, p.pending, p.due,
       (SELECT count(*) FROM (SELECT FROM pgq.job_rows j
                               WHERE j.queue_id = q.queue_id AND j.state = 'w' LIMIT $1) s)
         AS waiting,
       (SELECT count(*) FROM (SELECT FROM pgq.job_rows j
                               WHERE j.queue_id = q.queue_id AND j.state = 'b' LIMIT $1) s)
         AS awaiting_parents,
       (SELECT count(*) FROM (SELECT FROM pgq.job_rows j
                               WHERE j.queue_id = q.queue_id AND j.state = 'r' LIMIT $1) s)
         AS running,
       (SELECT count(*) FROM (SELECT FROM pgq.job_rows j
                               WHERE j.queue_id = q.queue_id AND j.state = 'r'
                                 AND j.lease_until < $2 LIMIT $1) s) AS expired,
       (SELECT count(*) FROM (SELECT FROM pgq.dead_jobs d
                               WHERE d.queue = q.name
                                 AND (q.keep_dead IS NULL OR d.died_at + q.keep_dead > $2)
                               LIMIT $1) s) AS dead,
       (SELECT COALESCE(sum(f.jobs), 0) FROM pgq.finished f
         WHERE f.queue_id = q.queue_id AND f.finished_at >= $2 - q.retention)
         + pgq.unflushed_completions(q.queue_id) AS done_recent,
       CASE WHEN o.oldest <= $2 AND isfinite(o.oldest) THEN o.oldest END AS oldest_ready,
       q.paused, q.max_running, o.levels >= 64 AS levels_cut, COALESCE(q.ring_id, 0) AS ring_id
  FROM pgq.queues q
 CROSS JOIN LATERAL (
       SELECT count(*) AS pending, count(*) FILTER (WHERE s.run_at <= $2) AS due
         FROM (SELECT j.run_at FROM pgq.job_rows j
                WHERE j.queue_id = q.queue_id AND j.state = 'p' LIMIT $1) s) p
 CROSS JOIN LATERAL (
       WITH RECURSIVE levels(np, depth) AS (
            SELECT (SELECT - j.priority FROM pgq.job_rows j
                     WHERE j.queue_id = q.queue_id AND j.state = 'p'
                     ORDER BY - j.priority LIMIT 1), 1
            UNION ALL
            SELECT (SELECT - j.priority FROM pgq.job_rows j
                     WHERE j.queue_id = q.queue_id AND j.state = 'p' AND - j.priority > l.np
                     ORDER BY - j.priority LIMIT 1), l.depth + 1
              FROM levels l WHERE l.np IS NOT NULL AND l.depth < 64)
       SELECT min((SELECT j.run_at FROM pgq.job_rows j
                    WHERE j.queue_id = q.queue_id AND j.state = 'p' AND - j.priority = l.np
                    ORDER BY - j.priority, j.run_at LIMIT 1)) AS oldest,
              max(l.depth) AS levels
         FROM levels l WHERE l.np IS NOT NULL) o
 WHERE $3 OR q.queue_id = ANY ($4)
 ORDER BY q.name)sql",
                                4,
                                {INT8OID, TIMESTAMPTZOID, BOOLOID, INT4ARRAYOID},
                                nullptr};

// The states of a queue's rows in pgq.job_rows the overview counts: pending,
// waiting in their group, waiting for their parents, running.
constexpr char kJobStates[] = {'p', 'w', 'b', 'r'};

// Columns of queue_overview, found by name once per execution.
struct OverviewColumns {
  explicit OverviewColumns(const pg::Result& rows)
      : queue_id(rows.ColumnNumber("queue_id")),
        name(rows.ColumnNumber("name")),
        pending(rows.ColumnNumber("pending")),
        due(rows.ColumnNumber("due")),
        waiting(rows.ColumnNumber("waiting")),
        awaiting_parents(rows.ColumnNumber("awaiting_parents")),
        running(rows.ColumnNumber("running")),
        expired(rows.ColumnNumber("expired")),
        dead(rows.ColumnNumber("dead")),
        done_recent(rows.ColumnNumber("done_recent")),
        oldest_ready(rows.ColumnNumber("oldest_ready")),
        paused(rows.ColumnNumber("paused")),
        max_running(rows.ColumnNumber("max_running")),
        levels_cut(rows.ColumnNumber("levels_cut")),
        ring_id(rows.ColumnNumber("ring_id")) {}
  int queue_id, name;
  int pending;  // ready or scheduled, read in claim order
  int due;      // of those read, the ones due
  int waiting, awaiting_parents, running, expired, dead, done_recent, oldest_ready, paused,
      max_running, levels_cut;
  int ring_id;  // 0: none
};

std::optional<TimestampTz> OptionalTime(const pg::Result& rows, uint64 row, int column) {
  bool is_null = false;
  const Datum value = rows.Value(row, column, &is_null);
  return is_null ? std::nullopt : std::optional<TimestampTz>(DatumGetTimestampTz(value));
}

// A queue's ring jobs as the overview counts them (every entry is due:
// pgq.job_rows holds the jobs that are not yet, store/ring_jobs.h).
struct Ring {
  int64 pending = 0, running = 0, expired = 0;
  std::optional<TimestampTz> oldest;
  bool estimated = false;
};
Ring CountRing(pg::SpiSession& spi, int32 queue_id, int64 limit, TimestampTz now,
               const std::vector<std::pair<int32, pg::job_ring::Running>>& running) {
  Ring ring;
  const pg::job_ring::Pending pending = ring::CountPending(spi, queue_id, limit);
  ring.pending = pending.count;
  if (pending.oldest <= now) ring.oldest = pending.oldest;
  ring.estimated = pending.cut || pending.no_lane;
  for (const auto& [of, counted] : running) {
    if (of == queue_id) {
      ring.running = counted.running;
      ring.expired = counted.expired;
    }
  }
  return ring;
}

// The earlier of two optional times.
std::optional<TimestampTz> Earlier(std::optional<TimestampTz> a, std::optional<TimestampTz> b) {
  if (!a) return b;
  if (!b) return a;
  return std::min(*a, *b);
}

// Replaces the counts (by kJobStates) that reached `limit` by estimates:
// the queue's rows in pgq.job_rows from the statistics, less the counts that
// are exact, shared among the states that reached the limit by their
// frequency in the whole table; never below `limit`, and left at `limit`
// without statistics. True when some count reached it.
bool EstimateDeepStates(Oid jobs, int32 queue_id, int64 limit,
                        int64 (&counts)[std::size(kJobStates)]) {
  double exact = 0;
  int deep = 0;
  for (const int64 count : counts) {
    if (count >= limit) {
      ++deep;
    } else {
      exact += static_cast<double>(count);
    }
  }
  if (deep == 0) return false;
  const std::optional<double> queue_rows =
      pg::EstimateEqualRows(jobs, "queue_id", Int32GetDatum(queue_id));
  if (!queue_rows) return true;
  double weights[std::size(kJobStates)] = {};
  double total_weight = 0;
  for (size_t i = 0; i < std::size(kJobStates); ++i) {
    if (counts[i] < limit) continue;
    weights[i] =
        deep == 1 ? 1.0
                  : pg::EstimateEqualRows(jobs, "state", CharGetDatum(kJobStates[i])).value_or(0.0);
    total_weight += weights[i];
  }
  const double rest = *queue_rows - exact;
  for (size_t i = 0; i < std::size(kJobStates); ++i) {
    if (counts[i] < limit) continue;
    const double share = total_weight > 0 ? weights[i] / total_weight : 1.0 / deep;
    counts[i] = std::max<int64>(limit, std::llround(rest * share));
  }
  return true;
}

pg::Statement jobs_size = {
    "SELECT pg_catalog.pg_total_relation_size($1) AS bytes,"
    " pg_catalog.pg_stat_get_live_tuples($1) AS live_rows",
    1,
    {OIDOID},
    nullptr};

// $1 the queue: its unfinished jobs, what max_pending bounds (core/
// pending_count.h): its rows, its rings' jobs and its dedupe followers, at
// one snapshot. A job moving between a ring and a row is in one place or
// the other at any snapshot (the move is one transaction).
pg::Statement count_unfinished = {R"sql(
SELECT (SELECT count(*) FROM pgq.job_rows j WHERE j.queue_id = $1)
     + (SELECT count(*) FROM pgq.dedupe_followers f WHERE f.queue_id = $1)
     + (SELECT count(*)
          FROM pgq.queue_rings q
               CROSS JOIN LATERAL (SELECT 1 FROM pgq.ring_jobs r
                                    WHERE r.ring = q.ring_id OFFSET 0) r
         WHERE q.queue_id = $1) AS unfinished)sql",
                                  1,
                                  {INT4OID},
                                  nullptr};

}  // namespace

int64 CountUnfinished(pg::SpiSession& spi, int32 queue_id, Snapshot snapshot) {
  pg::Params params;
  params.Set(0, Int32GetDatum(queue_id));
  return spi.ExecuteAt(count_unfinished, params, snapshot).Int64(0, "unfinished");
}

int64 CountQueueJobs(pg::SpiSession& spi, int32 queue_id, Datum name) {
  pg::Params params;
  params.Set(0, Int32GetDatum(queue_id)).Set(1, name);
  return spi.Execute(queue_holds_jobs, params).Int64(0, "jobs") + ring::Unfinished(spi, queue_id);
}

void PurgeQueueJobs(pg::SpiSession& spi, int32 queue_id, Datum name, TimestampTz now) {
  pg::Params by_id;
  by_id.Set(0, Int32GetDatum(queue_id));
  internal::ParentsDied(spi, spi.Execute(delete_queue_parents, by_id), now);
  internal::ParentsDied(spi, spi.Execute(ring_parents_of_queue, by_id), now);
  internal::DeleteQueueDead(spi, name);
}

std::vector<QueueOverview> ReadQueueOverview(pg::SpiSession& spi, const Scope& scope,
                                             int64 exact_up_to, TimestampTz now) {
  const int64 limit = exact_up_to + 1;
  pg::Params params;
  params.Set(0, Int64GetDatum(limit)).Set(1, TimestampTzGetDatum(now));
  internal::SetScope(params, 2, scope);
  const pg::Result rows = spi.Execute(queue_overview, params);
  const Catalog& catalog = InstalledCatalog();
  std::vector<QueueOverview> queues;
  if (rows.empty()) return queues;
  // The leases of running ring jobs are in the map once the lanes are built
  // after a start.
  ring::EnsureLanes(spi);
  const auto running = pg::job_ring::CountRunning(now);
  const OverviewColumns c(rows);
  queues.reserve(rows.size());
  for (uint64 row = 0; row < rows.size(); ++row) {
    int64 jobs[std::size(kJobStates)] = {rows.Int64(row, c.pending), rows.Int64(row, c.waiting),
                                         rows.Int64(row, c.awaiting_parents),
                                         rows.Int64(row, c.running)};
    const int64 pending_read = jobs[0];
    const int64 due_read = rows.Int64(row, c.due);
    int64 expired = rows.Int64(row, c.expired);
    int64 dead = rows.Int64(row, c.dead);
    bool estimated = rows.Bool(row, c.levels_cut) || expired >= limit;
    estimated |= EstimateDeepStates(catalog.jobs, rows.Int32(row, c.queue_id), limit, jobs);
    if (dead >= limit) {
      estimated = true;
      bool is_null = false;
      const std::optional<double> rows_dead =
          pg::EstimateEqualRows(catalog.dead_jobs, "queue", rows.Value(row, c.name, &is_null));
      if (rows_dead) dead = std::max<int64>(limit, std::llround(*rows_dead));
    }
    // A deep queue's pending jobs split as the ones read (in claim order).
    const int64 due = pending_read >= limit
                          ? std::llround(static_cast<double>(jobs[0]) * due_read / pending_read)
                          : due_read;
    bool no_cap = false;
    const Datum max_running = rows.Value(row, c.max_running, &no_cap);
    const int32 queue_id = rows.Int32(row, c.queue_id);
    const Ring ring =
        rows.Int32(row, c.ring_id) == 0 ? Ring() : CountRing(spi, queue_id, limit, now, running);
    estimated |= ring.estimated;
    queues.push_back(QueueOverview{
        rows.Text(row, c.name), due + jobs[1] + ring.pending, jobs[0] - due, jobs[3] + ring.running,
        std::min(expired, jobs[3]) + ring.expired, dead, rows.Int64(row, c.done_recent), jobs[2],
        Earlier(OptionalTime(rows, row, c.oldest_ready), ring.oldest), rows.Bool(row, c.paused),
        no_cap ? std::nullopt : std::optional<int32>(DatumGetInt32(max_running)), estimated});
    queues.back().queue_id = queue_id;
  }
  return queues;
}

TableSize JobsTableSize(pg::SpiSession& spi, Oid relid) {
  pg::Params params;
  params.Set(0, ObjectIdGetDatum(relid));
  const pg::Result size = spi.Execute(jobs_size, params);
  return TableSize{size.Int64(0, "bytes"), size.Int64(0, "live_rows")};
}

}  // namespace pgq::store
