// The claim statement: up to n ready jobs, leased in the same statement that
// selects them (FOR UPDATE SKIP LOCKED), so two workers never take the same
// job and never wait on each other.
//
// The scan starts at the queue's claim hint (core/claim_hint.h) instead of
// the start of the queue, and the same statement reports, from the same
// snapshot, what the next claim may skip: that is what keeps a claim's cost
// flat when VACUUM cannot remove the index entries of jobs already taken.
#include <algorithm>
#include <vector>

#include "pg/dirty_count.h"
#include "pg/index_peek.h"
#include "pg/ledger.h"
#include "pg/queue_lock.h"
#include "pg/settings.h"
#include "store/catalog.h"
#include "store/internal.h"
#include "store/ring_jobs.h"

namespace pgq::store {

namespace {

using internal::BuiltStatement;

// $1 queue id, $2 n, $3 lease, $4 now, $5 queue name, $6..$8 the key the
// scan starts at, as (- priority, run_at, id): the expression of
// jobs_ready_idx, $9 this backend's pid (who claimed, for
// pgq.running_jobs). One row per claimed job, in claim order. The first
// row's key is where the next claim may start: every pending ready job
// before it in this snapshot is locked by a transaction that will claim or
// remove it, or reset the hint if it rolls back (the ledger's locked
// note), and the claimed jobs themselves are running once this commits.
// `bounded`: only jobs before the key ($10, $11, $12), as ($6, $7, $8)
// (a claim of a ring queue takes the jobs of pgq.job_rows that come before its
// ring's next entry, service/claim.cpp).
std::string ClaimSql(std::string_view record_claimer, bool bounded = false) {
  std::string sql = R"sql(
WITH claimed AS (
  UPDATE pgq.job_rows j
     SET state = 'r', attempt = j.attempt + 1, lease_until = $4 + $3)sql";
  sql += record_claimer;
  sql += R"sql(
   WHERE j.id = ANY (ARRAY(
     SELECT p.id FROM pgq.job_rows p
      WHERE p.queue_id = $1 AND p.state = 'p' AND p.run_at <= $4
        AND (- p.priority, p.run_at, p.id) >= ($6, $7, $8))sql";
  if (bounded) sql += "\n        AND (- p.priority, p.run_at, p.id) < ($10, $11, $12)";
  sql += R"sql(
      ORDER BY - p.priority, p.run_at, p.id
      LIMIT $2 FOR UPDATE OF p SKIP LOCKED))
  RETURNING j.id, j.payload, j.attempt, j.max_attempts, j.lease_until, j.enqueued_at,
            j.priority, j.run_at, j.trace_context, j.trace_links
)
SELECT id, $5, payload, attempt, max_attempts, lease_until, enqueued_at, priority, run_at,
       trace_context, trace_links
  FROM claimed ORDER BY priority DESC, run_at, id)sql";
  return sql;
}

// A ring queue's claim of pgq.job_rows (ClaimSql's choice, bounded by
// $10..$12): a job taken that its queue serves on a ring ($13, the
// priorities of its rings) is deleted, its claim's attempt and lease
// returned, and goes onto the ring already handed out (ring::TakeOnto,
// the caller); the rest are claimed in place, as ClaimSql does: a job
// with progress reported (a ring entry keeps none), the last firing of a
// schedule (pgq.schedules and the no-overlap rule find a running firing
// by its row), a grouped job (its group's count would move from its
// row to a hold: an insert and a delete more per job, grouped
// claim+complete measured 0.89x; bench/RESULTS.md) and a job with trace
// links (a ring entry keeps none; ADR 0030). Both return the
// columns TakeOnto reads, `moved` telling them apart, in claim order.
// `chosen`: which rows, in which order (by default those between the
// hint and the bound, ClaimSql's).
std::string ClaimOntoRingSql(std::string_view chosen = R"sql(
   WHERE p.queue_id = $1 AND p.state = 'p' AND p.run_at <= $4
     AND (- p.priority, p.run_at, p.id) >= ($6, $7, $8)
     AND (- p.priority, p.run_at, p.id) < ($10, $11, $12)
   ORDER BY - p.priority, p.run_at, p.id)sql") {
  // Decided as the rows are chosen (one evaluation, and a side with no
  // row reads nothing: its array is empty).
  std::string sql = R"sql(
WITH picked AS MATERIALIZED (
  SELECT p.id,
         p.progress IS NULL AND p.group_key IS NULL AND p.trace_links IS NULL
         AND p.priority = ANY ($13)
         AND p.id NOT IN (SELECT r.last_job_id FROM pgq.recurring r
                           WHERE r.queue_id = $1 AND r.last_job_id IS NOT NULL) AS moves
    FROM pgq.job_rows p)sql";
  sql += chosen;
  sql += R"sql(
   LIMIT $2 FOR UPDATE OF p SKIP LOCKED),
moved AS (
  DELETE FROM pgq.job_rows j WHERE j.id = ANY (ARRAY(SELECT id FROM picked WHERE moves))
  RETURNING j.id, j.payload, j.attempt + 1 AS attempt, j.max_attempts, $4 + $3 AS lease_until,
            j.enqueued_at, j.priority, j.run_at, j.trace_context, j.trace_links, true AS moved,
            j.group_key, j.dedupe_key, j.dedupe_for, j.last_error, j.has_dependents),
kept AS (
  UPDATE pgq.job_rows j
     SET state = 'r', attempt = j.attempt + 1, lease_until = $4 + $3, claimed_by = $9,
         claimed_at = $4
   WHERE j.id = ANY (ARRAY(SELECT id FROM picked WHERE NOT moves))
  RETURNING j.id, j.payload, j.attempt, j.max_attempts, j.lease_until, j.enqueued_at,
            j.priority, j.run_at, j.trace_context, j.trace_links, false AS moved, j.group_key,
            j.dedupe_key, j.dedupe_for, j.last_error, j.has_dependents)
SELECT id, $5 AS queue, payload, attempt, max_attempts, lease_until, enqueued_at, priority, run_at,
       trace_context, trace_links, moved, group_key, dedupe_key, dedupe_for, last_error,
       has_dependents
  FROM (SELECT * FROM moved UNION ALL SELECT * FROM kept) c
 ORDER BY priority DESC, run_at, id)sql";
  return sql;
}

pg::Statement& claim_jobs_onto_ring() {
  static BuiltStatement statement{
      ClaimOntoRingSql(),
      {INT4OID, INT4OID, INTERVALOID, TIMESTAMPTZOID, TEXTOID, INT4OID, TIMESTAMPTZOID, INT8OID,
       INT4OID, INT4OID, TIMESTAMPTZOID, INT8OID, INT4ARRAYOID}};
  return statement.get();
}

// The rows of the ids $6 still due, as a fair ring's order handed them
// out (ClaimRowIds; $7, $8, $10..$12 unused).
pg::Statement& claim_row_ids() {
  static BuiltStatement statement{
      ClaimOntoRingSql(R"sql(
   WHERE p.id = ANY ($6) AND p.queue_id = $1 AND p.state = 'p' AND p.run_at <= $4
   ORDER BY p.id)sql"),
      {INT4OID, INT4OID, INTERVALOID, TIMESTAMPTZOID, TEXTOID, INT8ARRAYOID, INT4OID, INT8OID,
       INT4OID, INT4OID, TIMESTAMPTZOID, INT8OID, INT4ARRAYOID}};
  return statement.get();
}

// The rows of the ids $6 still due, claimed in place (ClaimRowIds without
// `onto`): ClaimSql's statement, the rows chosen by id.
pg::Statement& claim_row_ids_in_place() {
  static BuiltStatement statement{
      R"sql(
WITH claimed AS (
  UPDATE pgq.job_rows j
     SET state = 'r', attempt = j.attempt + 1, lease_until = $4 + $3, claimed_by = $7,
         claimed_at = $4
   WHERE j.id = ANY (ARRAY(
     SELECT p.id FROM pgq.job_rows p
      WHERE p.id = ANY ($6) AND p.queue_id = $1 AND p.state = 'p' AND p.run_at <= $4
      ORDER BY p.id
      LIMIT $2 FOR UPDATE OF p SKIP LOCKED))
  RETURNING j.id, j.payload, j.attempt, j.max_attempts, j.lease_until, j.enqueued_at,
            j.priority, j.run_at, j.trace_context, j.trace_links
)
SELECT id, $5, payload, attempt, max_attempts, lease_until, enqueued_at, priority, run_at,
       trace_context, trace_links
  FROM claimed ORDER BY priority DESC, run_at, id)sql",
      {INT4OID, INT4OID, INTERVALOID, TIMESTAMPTZOID, TEXTOID, INT8ARRAYOID, INT4OID}};
  return statement.get();
}

pg::Statement& claim_jobs() {
  static BuiltStatement statement{ClaimSql(", claimed_by = $9, claimed_at = $4"),
                                  {INT4OID, INT4OID, INTERVALOID, TIMESTAMPTZOID, TEXTOID, INT4OID,
                                   TIMESTAMPTZOID, INT8OID, INT4OID}};
  return statement.get();
}

pg::Statement& claim_jobs_before() {
  static BuiltStatement statement{
      ClaimSql(", claimed_by = $9, claimed_at = $4", true),
      {INT4OID, INT4OID, INTERVALOID, TIMESTAMPTZOID, TEXTOID, INT4OID, TIMESTAMPTZOID, INT8OID,
       INT4OID, INT4OID, TIMESTAMPTZOID, INT8OID}};
  return statement.get();
}

// The pending jobs not due at $2 from the scan start $3..$5 on: their
// earliest run_at and the first of them in claim order (all NULL if none).
// Only after a reset or when the alarm rings (ScanPlan::must_report_passed).
pg::Statement passed_jobs = {R"sql(
SELECT (SELECT min(u.run_at) FROM pgq.job_rows u
         WHERE u.queue_id = $1 AND u.state = 'p' AND u.run_at > $2
           AND (- u.priority, u.run_at, u.id) >= ($3, $4, $5)) AS earliest,
       a.priority, a.run_at, a.id
  FROM (SELECT) AS one LEFT JOIN LATERAL (
    SELECT u.priority, u.run_at, u.id FROM pgq.job_rows u
     WHERE u.queue_id = $1 AND u.state = 'p' AND u.run_at > $2
       AND (- u.priority, u.run_at, u.id) >= ($3, $4, $5)
     ORDER BY - u.priority, u.run_at, u.id LIMIT 1) a ON true)sql",
                             5,
                             {INT4OID, TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID, INT8OID},
                             nullptr};

core::ClaimAlarm PassedJobs(pg::SpiSession& spi, int32 queue_id, TimestampTz now,
                            const core::ClaimKey& from) {
  pg::Params params;
  params.Set(0, Int32GetDatum(queue_id))
      .Set(1, TimestampTzGetDatum(now))
      .Set(2, Int32GetDatum(-from.priority))
      .Set(3, TimestampTzGetDatum(from.run_at))
      .Set(4, Int64GetDatum(from.id));
  pg::Result passed = spi.Execute(passed_jobs, params);
  bool none = false;
  const Datum due = passed.Value(0, "earliest", &none);
  const core::ClaimAlarm alarm =
      none ? core::ClaimAlarm{}
           : core::ClaimAlarm{true, DatumGetTimestampTz(due), internal::ClaimKeyOf(passed, 0)};
  passed.Free();  // a waiting claim runs this again and again
  return alarm;
}

// The claim hint's plan for the queue, with the jobs this transaction made
// pending in it (pg/ledger.h OwnDue: the shared hint learns of them at
// commit, and a claim of the same transaction must find them, e.g. the
// next job of a FIFO group its completion promoted, or a job it enqueued
// after the hint said the queue had nothing). A plan moved for them starts
// earlier than the hint's: its scan covers more, so what it finds may be
// published as any scan's (an uncommitted job published as the first
// ready one only makes others start a little early).
core::ScanPlan PlanClaim(int32 queue_id, pg::QueueSlot* slot, TimestampTz now,
                         bool* own = nullptr) {
  if (own != nullptr) *own = false;
  if (slot == nullptr) return core::ScanPlan{0, false, false, core::kFirstKey, false};
  core::ScanPlan plan = pg::PlanClaimScan(slot, now);
  const std::optional<core::ClaimKey> own_due = pg::ledger::OwnDue(queue_id);
  if (own_due && (plan.skip_scan || core::ClaimsBefore(*own_due, plan.from))) {
    plan.skip_scan = false;
    plan.from = *own_due;
    plan.must_report_passed =
        plan.alarm_consumed || !core::ClaimsBefore(core::kFirstKey, plan.from);
    if (own != nullptr) *own = true;
  }
  return plan;
}

// `onto`: the priorities the queue serves on rings, whose jobs a claim
// moves onto them (ClaimOntoRingSql; nullptr: none, claimed in place).
pg::Result ClaimReady(pg::SpiSession& spi, int32 queue_id, Datum name, int32 n, Datum lease,
                      TimestampTz now, pg::QueueSlot* slot, const core::ClaimKey* before = nullptr,
                      const std::vector<int32>* onto = nullptr) {
  bool own = false;
  const core::ScanPlan plan = PlanClaim(queue_id, slot, now, &own);
  if (plan.skip_scan) return pg::Result();  // nothing pending: no statement at all
  // What is due is judged by the clock read after the hint: a job whose
  // commit lowered the hint before we read it was enqueued (its run_at, its
  // transaction's start) before that, so it is due for this claim. With a
  // clock read earlier, a job enqueued and committed in between would look
  // not due yet, the claim would find the queue empty and publish that
  // with the generation it read, and the job would be skipped (the hint's
  // invariant (I), core/claim_hint.h).
  now = std::max(now, pg::Now());
  core::ScanResult result{false, core::kFirstKey, {}};
  if (slot != nullptr && plan.must_report_passed) {
    result.passed = PassedJobs(spi, queue_id, now, plan.from);
  }
  pg::Params params;
  params.Set(0, Int32GetDatum(queue_id))
      .Set(1, Int32GetDatum(n))
      .Set(2, lease)
      .Set(3, TimestampTzGetDatum(now))
      .Set(4, name)
      .Set(5, Int32GetDatum(-plan.from.priority))
      .Set(6, TimestampTzGetDatum(plan.from.run_at))
      .Set(7, Int64GetDatum(plan.from.id))
      .Set(8, Int32GetDatum(MyProcPid));
  if (before != nullptr) {
    params.Set(9, Int32GetDatum(-before->priority))
        .Set(10, TimestampTzGetDatum(before->run_at))
        .Set(11, Int64GetDatum(before->id));
  } else if (onto != nullptr) {
    // No bound: past every key.
    params.Set(9, Int32GetDatum(PG_INT32_MAX))
        .Set(10, TimestampTzGetDatum(DT_NOEND))
        .Set(11, Int64GetDatum(PG_INT64_MAX));
  }
  if (onto != nullptr) params.Set(12, internal::Int4Array(*onto));
  pg::Result jobs = spi.Execute(onto != nullptr     ? claim_jobs_onto_ring()
                                : before != nullptr ? claim_jobs_before()
                                                    : claim_jobs(),
                                params);
  if (onto != nullptr) ring::TakeOnto(spi, queue_id, jobs, now);
  const uint64 claimed = jobs.size();
  pg::ledger::NoteCount(queue_id, pg::kClaims, claimed);
  // Started at this transaction's own pending jobs: its next claim starts
  // at the first job this one took (an own job before it would have been
  // taken first), or at the bound this one stopped at.
  if (own) {
    const core::ClaimKey first = claimed > 0 ? internal::ClaimKeyOf(jobs, 0) : core::kFirstKey;
    pg::ledger::OwnScannedTo(queue_id, claimed > 0 ? &first : before);
  }
  if (slot == nullptr) return jobs;
  // Others skip the rows this claim locked; if it rolls back they are
  // pending again behind a hint that moved on.
  if (claimed > 0) pg::ledger::NoteLocked(queue_id);
  // A snapshot older than the read of the hint (REPEATABLE READ) could
  // publish past jobs that committed in between; such claims only read it.
  // A bounded claim that found nothing says nothing of the jobs past its
  // bound: it publishes only what it found.
  if (!IsolationUsesXactSnapshot() && (before == nullptr || claimed > 0)) {
    result.found_ready = claimed > 0;
    if (claimed > 0) result.first_ready = internal::ClaimKeyOf(jobs, 0);
    pg::PublishClaimScan(slot, plan, result);
  }
  return jobs;
}

}  // namespace

std::vector<int32> SpreadClaim(const std::vector<SpreadQueue>& queues, int32 n, TimestampTz now) {
  std::vector<int32> counts(queues.size(), 0);
  const Catalog& catalog = InstalledCatalog();
  const JobColumns& c = catalog.job_columns;
  // The next n ready jobs of each queue from its claim hint on (index
  // probes, no statement), then the n first of them all in claim order.
  struct Next {
    pg::OrderKey key;
    size_t queue;
  };
  std::vector<Next> next;
  size_t looked_at = 0, last = 0;
  for (size_t i = 0; i < queues.size(); ++i) {
    if (queues[i].id == 0) continue;  // left out
    const core::ScanPlan plan = PlanClaim(queues[i].id, queues[i].slot, now);
    // Nothing pending there (and no ring entry).
    if (plan.skip_scan && queues[i].ring_keys.empty()) continue;
    ++looked_at;
    last = i;
    for (const pg::OrderKey& key : queues[i].ring_keys) next.push_back(Next{key, i});
    if (plan.skip_scan) continue;
    const pg::OrderKey from{-plan.from.priority, plan.from.run_at, plan.from.id};
    const TimestampTz due_by = std::max(now, pg::Now());  // after the hint, as ClaimReady
    for (const pg::OrderKey& key :
         pg::PeekIndex(catalog.jobs, catalog.ready_index, queues[i].id, from,
                       pg::PeekColumns{c.priority, c.run_at, c.id, c.state}, due_by, 'p', n)) {
      next.push_back(Next{key, i});
    }
  }
  if (looked_at == 1) {
    counts[last] = n;  // one queue: its own claim finds its jobs
    return counts;
  }
  const auto earlier = [](const Next& a, const Next& b) {
    if (a.key.second != b.key.second) return a.key.second < b.key.second;
    if (a.key.third != b.key.third) return a.key.third < b.key.third;
    return a.key.fourth < b.key.fourth;
  };
  const size_t take = std::min(next.size(), static_cast<size_t>(n));
  std::partial_sort(next.begin(), next.begin() + take, next.end(), earlier);
  for (size_t k = 0; k < take; ++k) ++counts[next[k].queue];
  return counts;
}

std::optional<core::ClaimKey> PeekReady(int32 queue_id, pg::QueueSlot* slot, TimestampTz now,
                                        bool* pending, bool* plain) {
  *pending = true;
  if (slot == nullptr) return std::nullopt;
  const core::ScanPlan plan = PlanClaim(queue_id, slot, now);
  *pending = !plan.skip_scan;
  if (plan.skip_scan) return std::nullopt;  // nothing pending
  const Catalog& catalog = InstalledCatalog();
  const JobColumns& c = catalog.job_columns;
  const pg::OrderKey from{-plan.from.priority, plan.from.run_at, plan.from.id};
  const std::vector<pg::OrderKey> keys =
      pg::PeekIndex(catalog.jobs, catalog.ready_index, queue_id, from,
                    pg::PeekColumns{c.priority, c.run_at, c.id, c.state, {c.group_key, c.progress}},
                    std::max(now, pg::Now()), 'p', 1);
  if (keys.empty()) return std::nullopt;
  if (plain != nullptr) *plain = keys[0].plain;
  return core::ClaimKey{-keys[0].second, keys[0].third, keys[0].fourth};
}

pg::Result ClaimBefore(pg::SpiSession& spi, int32 queue_id, Datum name, int32 n, Datum lease,
                       TimestampTz now, pg::QueueSlot* slot, const core::ClaimKey* before,
                       const std::vector<int32>* onto) {
  return ClaimReady(spi, queue_id, name, n, lease, now, slot, before, onto);
}

pg::Result ClaimRowIds(pg::SpiSession& spi, int32 queue_id, Datum name,
                       const std::vector<int64>& ids, Datum lease, TimestampTz now,
                       const std::vector<int32>* onto) {
  if (ids.empty()) return pg::Result();
  now = std::max(now, pg::Now());  // as ClaimReady: due by the clock read last
  pg::Params params;
  params.Set(0, Int32GetDatum(queue_id))
      .Set(1, Int32GetDatum(static_cast<int32>(ids.size())))
      .Set(2, lease)
      .Set(3, TimestampTzGetDatum(now))
      .Set(4, name)
      .Set(5, internal::Int8Array(ids));
  if (onto == nullptr) {
    params.Set(6, Int32GetDatum(MyProcPid));
  } else {
    // ($7, $8, $10..$12: the bounds ClaimOntoRingSql's other use reads.)
    params.Set(6, Int32GetDatum(0))
        .Set(7, Int64GetDatum(0))
        .Set(8, Int32GetDatum(MyProcPid))
        .Set(9, Int32GetDatum(0))
        .Set(10, TimestampTzGetDatum(now))
        .Set(11, Int64GetDatum(0))
        .Set(12, internal::Int4Array(*onto));
  }
  pg::Result jobs =
      spi.Execute(onto == nullptr ? claim_row_ids_in_place() : claim_row_ids(), params);
  if (onto != nullptr) ring::TakeOnto(spi, queue_id, jobs, now);
  pg::ledger::NoteCount(queue_id, pg::kClaims, jobs.size());
  // Others skip the rows this claim locked; if it rolls back they are
  // pending again, maybe behind the hint.
  if (jobs.size() > 0) pg::ledger::NoteLocked(queue_id);
  return jobs;
}

int64 CountRunning(int32 queue_id, int64 at_most) {
  const Catalog& catalog = InstalledCatalog();
  return pg::CountDirty(catalog.jobs, catalog.running_index, queue_id, catalog.job_columns.id,
                        catalog.job_columns.state, 'r', at_most);
}

pg::Result Claim(pg::SpiSession& spi, int32 queue_id, Datum name, int32 n, Datum lease,
                 TimestampTz now, pg::QueueSlot* slot, int32 max_running) {
  if (slot != nullptr) pg::SetQueueCapped(slot, max_running > 0);
  if (max_running <= 0) return ClaimReady(spi, queue_id, name, n, lease, now, slot);
  const Catalog& catalog = InstalledCatalog();
  // One capped claim at a time counts and claims; the next one's count sees
  // these claims whether this transaction has committed or not, so the lock
  // is released with the statement, not held to commit (pg/dirty_count.h).
  // Jobs that stop running meanwhile are counted until they commit: a claim
  // may take fewer than there is room for, never more.
  pg::LockQueueCap(queue_id);
  const int64 running =
      pg::CountDirty(catalog.jobs, catalog.running_index, queue_id, catalog.job_columns.id,
                     catalog.job_columns.state, 'r', max_running);
  if (running >= max_running) {
    pg::UnlockQueueCap(queue_id);
    return pg::Result();
  }
  pg::Result jobs =
      ClaimReady(spi, queue_id, name, static_cast<int32>(std::min<int64>(n, max_running - running)),
                 lease, now, slot);
  pg::UnlockQueueCap(queue_id);
  return jobs;
}

}  // namespace pgq::store
