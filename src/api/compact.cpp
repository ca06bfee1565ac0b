// Compaction of pgq.jobs (ADR 0008) and pgq.compact_jobs().
//
// VACUUM cannot remove a row version that some open transaction might still
// see, so a transaction held open for minutes leaves every job processed
// meanwhile in the table and its indexes. The queue's live set is small
// (pending, running and waiting jobs), so instead of waiting for VACUUM we
// rewrite the table: under an ACCESS EXCLUSIVE lock, copy the live rows
// aside, TRUNCATE (a new, empty file, whatever the xmin horizon), write them
// back frozen and rebuild the indexes. Frozen rows are visible to every
// snapshot, so a REPEATABLE READ transaction that began before the rewrite
// still sees the jobs that are there (a plain reinsertion would show it an
// empty table: its complete() would miss its own job).
#include "api/compact.h"

#include "pg/settings.h"
#include "pg/spi.h"

extern "C" {
#include "access/heapam.h"
#include "access/heaptoast.h"
#include "access/tableam.h"
#include "catalog/namespace.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
}

namespace pgq::api {

namespace {

// A generous size of one live job with its index entries, and how much of
// the table the live jobs may fill for a rewrite to be worth its lock.
constexpr int64 kLiveJobBytes = 1024;
constexpr int64 kWorthRatio = 8;

// An automatic rewrite waits at most this long for its lock (every claim
// and enqueue queues behind a waiting ACCESS EXCLUSIVE request) and keeps
// its lock for milliseconds: a few thousand live jobs at most.
constexpr int kAutoLockTimeoutMillis = 20;
constexpr int64 kAutoMaxJobs = 10000;
constexpr int64 kAutoMaxBytes = 64 * 1024 * 1024;

constexpr int64 kTooBig = -1;
constexpr int64 kBusy = -2;

pg::Statement jobs_size = {
    "SELECT pg_catalog.pg_total_relation_size($1), pg_catalog.pg_stat_get_live_tuples($1)",
    1,
    {OIDOID},
    nullptr};

Oid JobsRelid() {
  return pg::Guard([] {
    const Oid relid = get_relname_relid("jobs", get_namespace_oid("pgq", false));
    if (!OidIsValid(relid)) elog(ERROR, "pgq.jobs does not exist");
    return relid;
  });
}

int64 JobsBytes(pg::SpiSession& spi, Oid relid, int64* live) {
  pg::Params params;
  params.Set(0, ObjectIdGetDatum(relid));
  const pg::Result size = spi.Execute(jobs_size, params);
  if (live != nullptr) *live = size.Int64(0, 2);
  return size.Int64(0, 1);
}

void ExecuteUtility(const char* sql) {
  if (SPI_execute(sql, false, 0) != SPI_OK_UTILITY) elog(ERROR, "pgq: \"%s\" failed", sql);
}

// Rewrites pgq.jobs, which the caller holds ACCESS EXCLUSIVE; returns the
// jobs kept, or kTooBig (having written nothing) when they exceed the caps.
// Copies live in `work`.
// INVARIANT: no C++ object lives in this frame; errors longjmp out of it.
int64 RewriteLocked(Oid relid, int64 max_jobs, int64 max_bytes, MemoryContext work) {
  // Every live row, detoasted: the TOAST table is truncated with the heap.
  CommandCounterIncrement();
  Relation rel = table_open(relid, NoLock);
  TupleDesc desc = RelationGetDescr(rel);
  Snapshot snapshot = RegisterSnapshot(GetLatestSnapshot());
  TableScanDesc scan = table_beginscan(rel, snapshot, 0, nullptr);
  MemoryContext outer = MemoryContextSwitchTo(work);
  int64 count = 0;
  int64 capacity = 64;
  int64 bytes = 0;
  HeapTuple* rows = static_cast<HeapTuple*>(palloc(capacity * sizeof(HeapTuple)));
  for (HeapTuple tuple; (tuple = heap_getnext(scan, ForwardScanDirection)) != nullptr;) {
    if (count == max_jobs) {
      count = kTooBig;
      break;
    }
    HeapTuple copy =
        HeapTupleHasExternal(tuple) ? toast_flatten_tuple(tuple, desc) : heap_copytuple(tuple);
    bytes += copy->t_len;
    if (bytes > max_bytes) {
      count = kTooBig;
      break;
    }
    if (count == capacity) {
      capacity *= 2;
      rows = static_cast<HeapTuple*>(repalloc(rows, capacity * sizeof(HeapTuple)));
    }
    rows[count++] = copy;
  }
  MemoryContextSwitchTo(outer);
  table_endscan(scan);
  UnregisterSnapshot(snapshot);
  // TRUNCATE refuses a table this session still has open.
  table_close(rel, NoLock);
  if (count == kTooBig) return kTooBig;

  if (SPI_connect() != SPI_OK_CONNECT) elog(ERROR, "pgq: SPI_connect failed");
  ExecuteUtility("TRUNCATE pgq.jobs");
  // Written back frozen (visible to every snapshot, as COPY FREEZE does):
  // legal because the table was truncated in this subtransaction, so no
  // other transaction can see these files unless this one commits.
  rel = table_open(relid, NoLock);
  BulkInsertState bulk = GetBulkInsertState();
  const CommandId command = GetCurrentCommandId(true);
  for (int64 i = 0; i < count; ++i) heap_insert(rel, rows[i], command, HEAP_INSERT_FROZEN, bulk);
  FreeBulkInsertState(bulk);
  table_close(rel, NoLock);
  CommandCounterIncrement();
  // The indexes, emptied by TRUNCATE, are rebuilt from the rows.
  ExecuteUtility("REINDEX TABLE pgq.jobs");
  if (SPI_finish() != SPI_OK_FINISH) elog(ERROR, "pgq: SPI_finish failed");
  return count;
}

// RewriteLocked in a subtransaction, after waiting at most lock_timeout_ms
// for the lock. A timeout (or the table in use by this session's own query)
// rolls the subtransaction back and returns kBusy; any other error goes on.
// INVARIANT: no C++ object lives in this frame; errors longjmp out of it.
int64 CompactInSubtransaction(Oid relid, int lock_timeout_ms, int64 max_jobs, int64 max_bytes) {
  MemoryContext caller_context = CurrentMemoryContext;
  ResourceOwner caller_owner = CurrentResourceOwner;
  MemoryContext work =
      AllocSetContextCreate(caller_context, "pgq compaction", ALLOCSET_DEFAULT_SIZES);
  // volatile: assigned in PG_TRY, read after a longjmp.
  volatile int64 result = kBusy;
  char timeout[32];
  snprintf(timeout, sizeof timeout, "%d", lock_timeout_ms);
  const int guc_level = NewGUCNestLevel();
  (void)set_config_option("lock_timeout", timeout, PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE,
                          true, 0, false);
  BeginInternalSubTransaction(nullptr);
  MemoryContextSwitchTo(caller_context);
  PG_TRY();
  {
    LockRelationOid(relid, AccessExclusiveLock);
    result = RewriteLocked(relid, max_jobs, max_bytes, work);
    // Too big: nothing was written; rolling back also lets go of the lock.
    if (result == kTooBig) {
      RollbackAndReleaseCurrentSubTransaction();
    } else {
      ReleaseCurrentSubTransaction();
    }
    MemoryContextSwitchTo(caller_context);
    CurrentResourceOwner = caller_owner;
  }
  PG_CATCH();
  {
    MemoryContextSwitchTo(caller_context);
    ErrorData* error = CopyErrorData();
    FlushErrorState();
    RollbackAndReleaseCurrentSubTransaction();
    MemoryContextSwitchTo(caller_context);
    CurrentResourceOwner = caller_owner;
    if (error->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE &&
        error->sqlerrcode != ERRCODE_OBJECT_IN_USE) {
      ReThrowError(error);
    }
    FreeErrorData(error);
    result = kBusy;
  }
  PG_END_TRY();
  AtEOXact_GUC(true, guc_level);
  MemoryContextDelete(work);
  return result;
}

}  // namespace

bool MayCompactJobs() {
  const Oid relid = JobsRelid();
  return pg::Guard([&] { return pg_class_ownercheck(relid, GetUserId()); });
}

bool JobsWantCompaction(int64* bytes) {
  *bytes = 0;
  const int64 min_bytes = pg::CompactMinBytes();
  if (min_bytes < 0 || !MayCompactJobs()) return false;
  const Oid relid = JobsRelid();
  pg::SpiSession spi;
  int64 live = 0;
  *bytes = JobsBytes(spi, relid, &live);
  return *bytes >= min_bytes && live * kLiveJobBytes * kWorthRatio <= *bytes;
}

CompactResult CompactJobs(int lock_timeout_ms, int64 max_jobs, int64 max_bytes) {
  const Oid relid = JobsRelid();
  CompactResult result;
  {
    pg::SpiSession spi;
    result.bytes_before = JobsBytes(spi, relid, nullptr);
  }
  const int64 kept = pg::Guard(
      [&] { return CompactInSubtransaction(relid, lock_timeout_ms, max_jobs, max_bytes); });
  if (kept == kBusy) {
    result.outcome = CompactOutcome::kBusy;
  } else if (kept == kTooBig) {
    result.outcome = CompactOutcome::kTooBig;
  } else {
    result.outcome = CompactOutcome::kCompacted;
    result.jobs = kept;
  }
  pg::SpiSession spi;
  result.bytes_after = JobsBytes(spi, relid, nullptr);
  return result;
}

CompactResult MaybeCompactJobs() {
  CompactResult result;
  int64 bytes = 0;
  if (!JobsWantCompaction(&bytes)) {
    result.outcome = CompactOutcome::kNotNeeded;
    result.bytes_before = result.bytes_after = bytes;
    return result;
  }
  return CompactJobs(kAutoLockTimeoutMillis, kAutoMaxJobs, kAutoMaxBytes);
}

}  // namespace pgq::api

using namespace pgq;

namespace {

// What an explicit pgq.compact_jobs() accepts: far more than the worker's
// own rewrites, which must stay short under load.
constexpr int kCallLockTimeoutMillis = 1000;
constexpr int64 kCallMaxJobs = 1000000;
constexpr int64 kCallMaxBytes = 512 * 1024 * 1024;

}  // namespace

// compact_jobs() returns bigint: the live jobs kept, NULL when the table was
// busy for a second.
PGQ_FUNCTION(pgq_compact_jobs) {
  // Checked before the lock: taking it needs no privilege of its own.
  if (!api::MayCompactJobs()) {
    pg::Raise(ERRCODE_INSUFFICIENT_PRIVILEGE, "permission denied to compact pgq.jobs",
              "Only the owner of pgq.jobs (the role that installed pgq_cpp) or a superuser may.");
  }
  if (IsolationUsesXactSnapshot()) {
    pg::Raise(ERRCODE_INVALID_TRANSACTION_STATE,
              "pgq.compact_jobs() must run in a READ COMMITTED transaction",
              "A snapshot older than the table lock would miss jobs committed before it.");
  }
  const api::CompactResult result =
      api::CompactJobs(kCallLockTimeoutMillis, kCallMaxJobs, kCallMaxBytes);
  if (result.outcome == api::CompactOutcome::kTooBig) {
    pg::Raise(ERRCODE_PROGRAM_LIMIT_EXCEEDED, "pgq.jobs holds too many live jobs to compact",
              "At most " + std::to_string(kCallMaxJobs) + " jobs and " +
                  std::to_string(kCallMaxBytes / (1024 * 1024)) + " MB are rewritten at once.",
              "VACUUM reclaims the space once no old transaction holds it.");
  }
  if (result.outcome == api::CompactOutcome::kBusy) PG_RETURN_NULL();
  PG_RETURN_INT64(result.jobs);
}
