// Dependencies (enqueue's after, SPEC §8): a job that waits until its
// parents are done, and dies with reason dependency_failed if one of them
// dies (dead or cancelled), as do its own dependents.
//
// A waiting job is in state 'b' with open_parents the number of parents not
// yet done, outside the ready index: thousands of them cost claims nothing.
// pgq.job_dependencies holds one row per (parent, child) not yet settled.
//
// The races, and what closes each:
//   - a parent finishing while a child is enqueued: the enqueue locks the
//     parent's row (KEY SHARE) and marks it has_dependents; the statement
//     that removes the parent waits for that enqueue to commit, then reads
//     the marked row and looks for children as committed now (SPI with the
//     latest snapshot, as foreign-key checks do), so it sees the child's row.
//     A parent already gone is found so by the enqueue's lock.
//   - the same for a parent on a ring (ADR 0028 "Dependencies on ring
//     jobs"), which has no row to lock: the enqueue notes in the lanes that
//     jobs may have dependents, takes the parent's lock (pg/queue_lock.h
//     LockRingParent) in share mode and looks at the job again; whoever
//     ends a ring job (store/ring_jobs.cpp ParentsAmong) takes that lock
//     exclusively when the note is set, so it waits for the enqueue and then
//     reads its pair. An end already in progress at the second look may
//     have asked before the note: the enqueue lets the lock go, waits for
//     it, and looks again.
//   - the last two parents completing at once: each decrements the child's
//     open_parents in one UPDATE of the child's row; the second waits for
//     the first and decrements what it committed, so exactly one makes the
//     child ready.
//   - a parent dying while another completes: a child with a dead parent
//     keeps that parent's row, so its count never reaches 0; it only leaves
//     by the cascade.
// Cycles cannot be built: a parent must exist before its child is enqueued.
//
// Both ends of a parent are bounded per statement, since a producer with a
// right on a queue may attach any number of children to another team's job
// (issue 30, D4): the statement in which a parent dies dead-letters up to
// kInlineBound dependents (through the levels) and records parents still
// holding dependents in pgq.dependency_failures; the one in which parents
// complete releases up to kInlineBound children and records parents with
// more in pgq.dependency_releases. Maintenance works through both.
// A released child is still released by one update of its own row per
// pair, whoever runs it, so fan-in stays exactly-once.
#include <algorithm>
#include <iterator>

#include "pg/ledger.h"
#include "pg/settings.h"
#include "store/internal.h"
#include "store/ring_jobs.h"

namespace pgq::store {

namespace {

using internal::BuiltStatement;

// Dependents dead-lettered in the transaction in which their parent died,
// or released (made ready) in the one in which it completed; the rest are
// maintenance's. A producer may attach any number of children to another
// team's job: that team's completion or failure does at most this much of
// their work.
constexpr int32 kInlineBound = 1000;

// $1 ids, $2 $3 scope. The live parents, locked so that none can leave
// before this transaction commits; with what a pending one's claim-order
// key needs (a claim skips it while it is locked).
pg::Statement lock_parents = {R"sql(
SELECT j.id, j.queue_id, j.state = 'p' AS pending, j.priority, j.run_at,
       pg_catalog.substr(j.trace_context, 1, 55) AS traceparent FROM pgq.job_rows j
 WHERE j.id = ANY ($1) AND ($2 OR j.queue_id = ANY ($3))
 ORDER BY j.id FOR KEY SHARE)sql",
                              3,
                              {INT8ARRAYOID, BOOLOID, INT4ARRAYOID},
                              nullptr};

// $1 ids not live, $2 $3 scope: what each of them is. Only what the
// caller holds a right on is looked at, so a job of another team's queue
// is answered as one that never existed, whatever its state (issue 30,
// D1): not found in the scope's dead jobs, followers or history, it is
// unknown. A job completed without a trace (its queue keeps no history)
// names no queue, so it is done only for a caller with a right on every
// queue (it can only have been one of theirs); for the others it is
// unknown too, or its answer would tell them when another team's job
// finished.
pg::Statement classify_parents = {R"sql(
SELECT m.id, v.dead, v.following,
       NOT (v.dead OR v.following OR v.kept
            OR ($2 AND m.id <= (SELECT s.last_value - CASE WHEN s.is_called THEN 0 ELSE 1 END
                                  FROM pgq.job_id_seq s))) AS unknown
  FROM pg_catalog.unnest($1) AS m(id),
       LATERAL (SELECT
         EXISTS (SELECT 1 FROM pgq.dead_jobs d JOIN pgq.queues q ON q.name = d.queue
                  WHERE d.id = m.id AND ($2 OR q.queue_id = ANY ($3))) AS dead,
         EXISTS (SELECT 1 FROM pgq.dedupe_followers f
                  WHERE f.id = m.id AND ($2 OR f.queue_id = ANY ($3))) AS following,
         EXISTS (SELECT 1 FROM pgq.job_history h
                  WHERE h.id = m.id AND ($2 OR h.queue_id = ANY ($3))) AS kept) AS v)sql",
                                  3,
                                  {INT8ARRAYOID, BOOLOID, INT4ARRAYOID},
                                  nullptr};

// $1 parents, $2 children: one row each pair, and the parents marked (their
// completion looks for children). The parents are locked by LockParents;
// the ones still to mark are locked for the update in id order, as every
// enqueue does, so two enqueues marking the same parents never deadlock.
pg::Statement add_dependencies = {R"sql(
WITH marked AS (
  UPDATE pgq.job_rows j SET has_dependents = true
   WHERE j.id IN (SELECT u.id FROM pgq.job_rows u WHERE u.id = ANY ($1) AND u.has_dependents IS NULL
                   ORDER BY u.id FOR NO KEY UPDATE)
)
INSERT INTO pgq.job_dependencies (parent_id, child_id)
SELECT p, c FROM pg_catalog.unnest($1) AS p, pg_catalog.unnest($2) AS c)sql",
                                  2,
                                  {INT8ARRAYOID, INT8ARRAYOID},
                                  nullptr};

// $1 a parent that completed, $2 at most: that many of its children (the
// lowest ids) have one open parent fewer (a pair is one row); a child with
// none left is ready, or joins its group's line. Read as committed now.
// The pairs are read by the parent's range of the primary key and deleted
// by ctid, and the children found by id (an array): index probes whatever
// the tables' size. Only this statement deletes a completed parent's rows
// (maintenance takes each parent under a row lock), so their ctids stay
// theirs. The last row has only `pairs`: how many pair rows it took (as
// many as asked: there may be more).
pg::Statement release_children = {R"sql(
WITH d AS (
  DELETE FROM pgq.job_dependencies x
   WHERE x.ctid = ANY (ARRAY(
     SELECT y.ctid FROM pgq.job_dependencies y WHERE y.parent_id = $1
      ORDER BY y.child_id LIMIT $2))
  RETURNING x.child_id
), u AS (
  UPDATE pgq.job_rows j
     SET open_parents = NULLIF(j.open_parents - 1, 0),
         state = CASE WHEN j.open_parents > 1 THEN 'b'
                      WHEN j.group_key IS NULL THEN 'p' ELSE 'w' END
   WHERE j.id = ANY (ARRAY(SELECT d.child_id FROM d)) AND j.state = 'b'
  RETURNING j.queue_id, j.id, j.priority, j.run_at, j.group_key, j.state
)
SELECT u.queue_id, u.id, u.priority, u.run_at, u.group_key, u.state, NULL::int8 AS pairs FROM u
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, (SELECT count(*) FROM d))sql",
                                  2,
                                  {INT8OID, INT4OID},
                                  nullptr};

// $1 a parent that completed, $2 now: maintenance releases the rest of its
// children.
pg::Statement record_release = {R"sql(
INSERT INTO pgq.dependency_releases (parent_id, done_at) VALUES ($1, $2)
ON CONFLICT (parent_id) DO NOTHING)sql",
                                2,
                                {INT8OID, TIMESTAMPTZOID},
                                nullptr};

// $1 at most. Parents whose children maintenance releases, each taken by
// one runner (SKIP LOCKED).
pg::Statement take_releases = {R"sql(
SELECT r.parent_id FROM pgq.dependency_releases r
 ORDER BY r.parent_id LIMIT $1 FOR UPDATE SKIP LOCKED)sql",
                               1,
                               {INT4OID},
                               nullptr};

// $1 a parent with no child left to release.
pg::Statement settle_release = {
    "DELETE FROM pgq.dependency_releases WHERE parent_id = $1", 1, {INT8OID}, nullptr};

// $1 jobs that died, $2 now: those with dependents are recorded as failed
// parents. Read as committed now. One index probe per job, however many
// dependents it or any other job has: a DISTINCT over the rows read them
// all, and an EXISTS may be planned as a join that reads the whole table
// (a lateral subquery with a LIMIT is not), issue 30, D4.
pg::Statement record_failures = {R"sql(
INSERT INTO pgq.dependency_failures (parent_id, failed_at)
SELECT DISTINCT p.id, $2
  FROM pg_catalog.unnest($1) AS p(id),
       LATERAL (SELECT 1 FROM pgq.job_dependencies d WHERE d.parent_id = p.id LIMIT 1) AS one
ON CONFLICT (parent_id) DO NOTHING)sql",
                                 2,
                                 {INT8ARRAYOID, TIMESTAMPTZOID},
                                 nullptr};

// $1 at most. Rows of failed parents, taken out: their children die. Read
// parent by parent, each one's rows by its range of the primary key, so
// that the rows of other parents (a live one may have a million) are never
// read: a join of the two tables, or an IN over the pairs, could be
// planned to read them all (issue 30, D4). The rows are locked, so their
// ctid stays theirs until the DELETE.
pg::Statement take_failed_rows = {R"sql(
DELETE FROM pgq.job_dependencies d
 WHERE d.ctid = ANY (ARRAY(
   SELECT x.ctid
     FROM (SELECT f.parent_id FROM pgq.dependency_failures f ORDER BY f.parent_id LIMIT $1) f,
          LATERAL (SELECT y.ctid FROM pgq.job_dependencies y
                    WHERE y.parent_id = f.parent_id ORDER BY y.child_id LIMIT $1
                      FOR UPDATE SKIP LOCKED) x
    LIMIT $1))
RETURNING d.parent_id, d.child_id)sql",
                                  1,
                                  {INT4OID},
                                  nullptr};

// $1 children, $2 their failed parent (same order), $3 now.
constexpr std::string_view kFailedChildren = R"sql(
DELETE FROM pgq.job_rows j WHERE j.id = ANY ($1) AND j.state = 'b' RETURNING *)sql";

pg::Statement& bury_children() {
  static BuiltStatement statement{internal::BurySql(kFailedChildren, R"sql('parent job ' || (
         SELECT u.p FROM ROWS FROM (pg_catalog.unnest($1::int8[]), pg_catalog.unnest($2::int8[]))
                         AS u(c, p)
          WHERE u.c = d.id LIMIT 1) || ' did not complete')sql",
                                                    "dependency_failed", "$3"),
                                  {INT8ARRAYOID, INT8ARRAYOID, TIMESTAMPTZOID}};
  return statement.get();
}

// $1 failed parents: those with no dependents left are settled. OFFSET 0
// keeps each NOT EXISTS an index probe per parent (not an anti-join that
// may read the whole table).
pg::Statement settle_failures = {R"sql(
DELETE FROM pgq.dependency_failures f
 WHERE f.parent_id = ANY ($1)
   AND NOT EXISTS (SELECT 1 FROM pgq.job_dependencies d WHERE d.parent_id = f.parent_id
                   OFFSET 0))sql",
                                 1,
                                 {INT8ARRAYOID},
                                 nullptr};

pg::Statement settle_all_failures = {R"sql(
DELETE FROM pgq.dependency_failures f
 WHERE NOT EXISTS (SELECT 1 FROM pgq.job_dependencies d WHERE d.parent_id = f.parent_id
                   OFFSET 0))sql",
                                     0,
                                     {},
                                     nullptr};

std::vector<int64> Ids(const pg::Result& rows, const char* column) {
  std::vector<int64> ids;
  if (rows.empty()) return ids;
  const int at = rows.ColumnNumber(column);
  ids.reserve(rows.size());
  for (uint64 row = 0; row < rows.size(); ++row) ids.push_back(rows.Int64(row, at));
  return ids;
}

// Dead-letters up to `budget` dependents of failed parents (and records
// those of them that have dependents in turn); how many rows it settled.
int64 Cascade(pg::SpiSession& spi, TimestampTz now, int64 budget) {
  int64 settled = 0;
  while (settled < budget) {
    pg::Params take;
    take.Set(0, Int32GetDatum(static_cast<int32>(std::min<int64>(budget - settled, 1000))));
    const pg::Result rows = spi.ExecuteSeeingLatest(take_failed_rows, take);
    if (rows.empty()) break;
    settled += static_cast<int64>(rows.size());
    const std::vector<int64> parents = Ids(rows, "parent_id");
    const std::vector<int64> children = Ids(rows, "child_id");
    pg::Params bury;
    bury.Set(0, internal::Int8Array(children))
        .Set(1, internal::Int8Array(parents))
        .Set(2, TimestampTzGetDatum(now));
    const pg::Result buried = spi.Execute(bury_children(), bury);
    if (!buried.empty()) {
      const int queue_column = buried.ColumnNumber("queue_id");
      for (uint64 row = 0; row < buried.size(); ++row) {
        internal::CountDead(buried.Int32(row, queue_column));
      }
      // A waiting job holds no place in its group: only keys move on.
      internal::MoveGroupsOn(spi, internal::KeysReleased(spi, buried, now));
      pg::Params record;
      record.Set(0, internal::Int8Array(Ids(buried, "id"))).Set(1, TimestampTzGetDatum(now));
      spi.ExecuteSeeingLatest(record_failures, record);
    }
    pg::Params settle;
    settle.Set(0, internal::Int8Array(parents));
    spi.ExecuteSeeingLatest(settle_failures, settle);
  }
  return settled;
}

// Releases up to `budget` children of `parent` (a job that completed):
// adds the groups they join to `groups`; how many pair rows it took.
int64 ReleaseChildren(pg::SpiSession& spi, int64 parent, int64 budget,
                      std::vector<internal::GroupRef>& groups) {
  pg::Params params;
  params.Set(0, Int64GetDatum(parent))
      .Set(1, Int32GetDatum(static_cast<int32>(std::min<int64>(budget, PG_INT32_MAX))));
  pg::Result released = spi.ExecuteSeeingLatest(release_children, params);
  const internal::KeyColumns key(released);
  const int queue_column = released.ColumnNumber("queue_id");
  const int group_column = released.ColumnNumber("group_key");
  const int state_column = released.ColumnNumber("state");
  const int pairs_column = released.ColumnNumber("pairs");
  int64 pairs = 0;
  for (uint64 row = 0; row < released.size(); ++row) {
    if (!released.IsNull(row, pairs_column)) {
      pairs = released.Int64(row, pairs_column);
      continue;
    }
    bool is_null = false;
    const char state = DatumGetChar(released.Value(row, state_column, &is_null));
    const int32 queue_id = released.Int32(row, queue_column);
    if (state == 'p') pg::ledger::NotePending(queue_id, key.Of(released, row), true);
    if (state == 'w') {
      groups.push_back(internal::GroupRef{queue_id, released.Text(row, group_column)});
    }
  }
  released.Free();
  return pairs;
}

// Maintenance: releases up to `budget` children of parents recorded in
// pgq.dependency_releases; how many pair rows it took.
int64 Release(pg::SpiSession& spi, int64 budget) {
  int64 taken = 0;
  std::vector<internal::GroupRef> groups;
  pg::Params take;
  take.Set(0, Int32GetDatum(100));
  const pg::Result parents = spi.ExecuteSeeingLatest(take_releases, take);
  for (uint64 row = 0; row < parents.size() && taken < budget; ++row) {
    const int64 parent = parents.Int64(row, "parent_id");
    const int64 asked = budget - taken;
    const int64 pairs = ReleaseChildren(spi, parent, asked, groups);
    taken += pairs;
    // INVARIANT: a parent that completed gets no new child (LockParents
    // finds only live jobs), so fewer than asked means none is left.
    if (pairs < asked) {
      pg::Params settle;
      settle.Set(0, Int64GetDatum(parent));
      spi.Execute(settle_release, settle);
    }
  }
  internal::MoveGroupsOn(spi, std::move(groups));
  return taken;
}

}  // namespace

namespace internal {

void AddDependencies(pg::SpiSession& spi, const std::vector<int64>& parents,
                     const std::vector<int64>& children) {
  pg::Params params;
  params.Set(0, Int8Array(parents)).Set(1, Int8Array(children));
  spi.Execute(add_dependencies, params);
}

std::vector<GroupRef> ParentsDone(pg::SpiSession& spi, const std::vector<int64>& parents,
                                  TimestampTz now) {
  std::vector<GroupRef> groups;
  int64 budget = kInlineBound;
  // One parent at a time: a child of two of them is updated twice, and each
  // update counts from the last.
  for (const int64 parent : parents) {
    const int64 asked = budget;
    const int64 pairs = asked > 0 ? ReleaseChildren(spi, parent, asked, groups) : 0;
    budget -= pairs;
    // As many as asked (or none asked): there may be more, maintenance's.
    if (pairs == asked) {
      pg::Params record;
      record.Set(0, Int64GetDatum(parent)).Set(1, TimestampTzGetDatum(now));
      spi.Execute(record_release, record);
    }
  }
  return groups;
}

void ParentsDied(pg::SpiSession& spi, const pg::Result& rows, TimestampTz now) {
  ParentsDied(spi, Ids(rows, "id"), now);
}

void ParentsDied(pg::SpiSession& spi, const std::vector<int64>& ids, TimestampTz now) {
  if (ids.empty()) return;
  pg::Params params;
  params.Set(0, Int8Array(ids)).Set(1, TimestampTzGetDatum(now));
  if (spi.ExecuteSeeingLatest(record_failures, params).empty()) return;
  (void)Cascade(spi, now, kInlineBound);
}

}  // namespace internal

namespace {

// Locks the jobs of `ids` that are rows of pgq.job_rows in `scope`; their
// ids, sorted.
// `traceparents`: those of the rows that have one are added.
std::vector<int64> LockRows(pg::SpiSession& spi, const Scope& scope, const std::vector<int64>& ids,
                            std::vector<std::string>* traceparents) {
  pg::Params params;
  params.Set(0, internal::Int8Array(ids)).Set(1, BoolGetDatum(scope.every)).Set(2, scope.ids);
  const pg::Result locked = spi.Execute(lock_parents, params);
  // A claim skips a pending job this transaction locks, and its queue's
  // claim hint moves past it: the hint comes back to it when the lock goes
  // (commit or abort), or it would wait for the next reset of the hints
  // (issue 30: another team's enqueue made its job unclaimable).
  if (!locked.empty()) {
    const internal::KeyColumns key(locked);
    const int queue_column = locked.ColumnNumber("queue_id");
    const int pending_column = locked.ColumnNumber("pending");
    for (uint64 row = 0; row < locked.size(); ++row) {
      if (!locked.Bool(row, pending_column)) continue;
      const int32 queue_id = locked.Int32(row, queue_column);
      pg::ledger::NotePending(queue_id, key.Of(locked, row), true);
      pg::ledger::NoteLocked(queue_id);
    }
    const int traceparent_column = locked.ColumnNumber("traceparent");
    for (uint64 row = 0; row < locked.size(); ++row) {
      bool is_null = false;
      (void)locked.Value(row, traceparent_column, &is_null);
      if (!is_null) traceparents->push_back(locked.Text(row, traceparent_column));
    }
  }
  return Ids(locked, "id");
}

// `from` less `taken` (both sorted).
std::vector<int64> Without(const std::vector<int64>& from, const std::vector<int64>& taken) {
  std::vector<int64> rest;
  std::set_difference(from.begin(), from.end(), taken.begin(), taken.end(),
                      std::back_inserter(rest));
  return rest;
}

}  // namespace

Parents LockParents(pg::SpiSession& spi, const Scope& scope, const std::vector<int64>& ids) {
  Parents parents;
  parents.live = LockRows(spi, scope, ids, &parents.traceparents);
  std::vector<int64> others = Without(ids, parents.live);
  if (others.empty()) return parents;
  // Jobs on the queues' rings (ADR 0028): held by their parent locks.
  std::vector<int64> on_rings = ring::HoldParents(spi, scope, others, &parents.traceparents);
  if (pg::job_ring::Available()) {
    std::sort(on_rings.begin(), on_rings.end());
    others = Without(others, on_rings);
    // A ring job moved into pgq.job_rows since the first look (a failure,
    // an expiry, progress) is a row now.
    if (!others.empty()) {
      const std::vector<int64> moved = LockRows(spi, scope, others, &parents.traceparents);
      on_rings.insert(on_rings.end(), moved.begin(), moved.end());
      others = Without(others, moved);
    }
    parents.live.insert(parents.live.end(), on_rings.begin(), on_rings.end());
    std::sort(parents.live.begin(), parents.live.end());
  }
  if (others.empty()) return parents;
  pg::Params params;
  params.Set(0, internal::Int8Array(others)).Set(1, BoolGetDatum(scope.every)).Set(2, scope.ids);
  const pg::Result found = spi.Execute(classify_parents, params);
  for (uint64 row = 0; row < found.size(); ++row) {
    const int64 id = found.Int64(row, "id");
    int64* first = found.Bool(row, "unknown")     ? &parents.unknown
                   : found.Bool(row, "dead")      ? &parents.dead
                   : found.Bool(row, "following") ? &parents.following
                                                  : nullptr;
    if (first != nullptr && *first == 0) *first = id;
  }
  return parents;
}

int64 TendDependencies(pg::SpiSession& spi, TimestampTz now, int32 batch) {
  const int64 settled = Cascade(spi, now, batch);
  pg::Params none;
  spi.Execute(settle_all_failures, none);
  return std::max(settled, Release(spi, batch));
}

}  // namespace pgq::store
