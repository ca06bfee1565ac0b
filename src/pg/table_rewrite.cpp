#include "pg/table_rewrite.h"

#include "pg/boundary.h"

extern "C" {
#include "access/heapam.h"
#include "access/heaptoast.h"
#include "access/tableam.h"
#include "storage/lmgr.h"
#include "utils/guc.h"
#include "utils/rel.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"
}

namespace pgq::pg {

namespace {

void ExecuteUtility(const char* sql) {
  if (SPI_execute(sql, false, 0) != SPI_OK_UTILITY) elog(ERROR, "pgq: \"%s\" failed", sql);
}

// Rewrites the table, which the caller holds ACCESS EXCLUSIVE; returns the
// rows kept, or kRewriteTooBig (having written nothing) when they exceed the
// caps.
// Copies live in `work`.
// INVARIANT: no C++ object lives in this frame; errors longjmp out of it.
int64 RewriteLocked(Oid relid, const char* name, int64 max_rows, int64 max_bytes,
                    MemoryContext work) {
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
    if (count == max_rows) {
      count = kRewriteTooBig;
      break;
    }
    HeapTuple copy =
        HeapTupleHasExternal(tuple) ? toast_flatten_tuple(tuple, desc) : heap_copytuple(tuple);
    bytes += copy->t_len;
    if (bytes > max_bytes) {
      count = kRewriteTooBig;
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
  if (count == kRewriteTooBig) return kRewriteTooBig;

  if (SPI_connect() != SPI_OK_CONNECT) elog(ERROR, "pgq: SPI_connect failed");
  ExecuteUtility(psprintf("TRUNCATE %s", name));
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
  ExecuteUtility(psprintf("REINDEX TABLE %s", name));
  if (SPI_finish() != SPI_OK_FINISH) elog(ERROR, "pgq: SPI_finish failed");
  return count;
}

// RewriteLocked in a subtransaction, after waiting at most lock_timeout_ms
// for the lock. A timeout (or the table in use by this session's own query)
// rolls the subtransaction back and returns kRewriteBusy; any other error goes on.
// INVARIANT: no C++ object lives in this frame; errors longjmp out of it.
int64 RewriteInSubtransaction(Oid relid, const char* name, int lock_timeout_ms, int64 max_rows,
                              int64 max_bytes) {
  MemoryContext caller_context = CurrentMemoryContext;
  ResourceOwner caller_owner = CurrentResourceOwner;
  MemoryContext work =
      AllocSetContextCreate(caller_context, "pgq compaction", ALLOCSET_DEFAULT_SIZES);
  // volatile: assigned in PG_TRY, read after a longjmp.
  volatile int64 result = kRewriteBusy;
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
    result = RewriteLocked(relid, name, max_rows, max_bytes, work);
    // Too big: nothing was written; rolling back also lets go of the lock.
    if (result == kRewriteTooBig) {
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
    result = kRewriteBusy;
  }
  PG_END_TRY();
  AtEOXact_GUC(true, guc_level);
  MemoryContextDelete(work);
  return result;
}

}  // namespace

int64 RewriteTableFrozen(Oid relid, const char* qualified_name, int lock_timeout_ms, int64 max_rows,
                         int64 max_bytes) {
  return Guard([&] {
    return RewriteInSubtransaction(relid, qualified_name, lock_timeout_ms, max_rows, max_bytes);
  });
}

}  // namespace pgq::pg
