// The launcher: one per cluster, started by the postmaster once recovery is
// over (so never on a hot standby, and at promotion). It keeps one
// maintenance worker running per database that has pgq_cpp.
//
// It cannot see pg_extension of another database, so it finds out by trying:
// every connectable, non-template database listed by pgq.databases gets a
// worker, which exits at once with WorkerExit::kNoExtension where pgq_cpp is
// not installed. Such a database is probed again every kProbeAgainMillis, or
// at once when a backend commits CREATE EXTENSION pgq_cpp there (the utility
// hook asks through shared memory). A new database is probed when the next
// scan of pg_database sees it.
//
// States of a database, as the launcher sees it:
//   no worker, not_before in the future  -> wait (restart delay, paused, absent)
//   no worker, not_before passed         -> start one
//   worker starting or running           -> watch it (the handle)
//   worker stopped                       -> read why from its shared slot
// A worker the launcher did not start (the launcher itself was restarted) is
// seen in the shared worker slots and left alone; the worker refuses to run
// twice for one database anyway.
#include <algorithm>

#include <boost/container/flat_map.hpp>

#include "bgw/bgw.h"
#include "pg/allocator.h"
#include "pg/boundary.h"
#include "pg/settings.h"
#include "pg/shared.h"

extern "C" {
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/pg_database.h"
#include "pgstat.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/snapmgr.h"
#include "utils/wait_event.h"
}

namespace pgq::bgw {

namespace {

constexpr long kScanMillis = 1000;         // pg_database is read this often
constexpr long kProbeAgainMillis = 10000;  // a database without pgq_cpp
// A worker that failed (an error it could not get past, or terminated) is
// started again at once: while none runs, no lease of the database expires.
// One that keeps failing soon after its start waits longer each time,
// kFirstRetryMillis doubled up to kMaxRestartDelayMillis; one that ran
// kHealthyMillis counts as a first failure again.
constexpr long kFirstRetryMillis = 100;
constexpr long kMaxRestartDelayMillis = 5000;
constexpr long kHealthyMillis = 60 * 1000;
constexpr long kNoSlotRetryMillis = 10000;  // max_worker_processes reached

struct Database {
  BackgroundWorkerHandle* handle = nullptr;  // in TopMemoryContext
  TimestampTz not_before = 0;
  TimestampTz started_at = 0;  // of the current or last worker
  int quick_failures = 0;      // failures in a row, each soon after its start
  bool without_extension = false;
};

// How long to wait before starting a worker again after its failure number
// `failures` in a row: 0 for the first.
long RestartDelayMillis(int failures) {
  if (failures <= 1) return 0;
  long delay = kFirstRetryMillis;
  for (int i = 2; i < failures && delay < kMaxRestartDelayMillis; ++i) delay *= 2;
  return std::min(delay, kMaxRestartDelayMillis);
}

using DatabaseMap = boost::container::flat_map<Oid, Database, std::less<Oid>,
                                               pg::ContextAllocator<std::pair<Oid, Database>>>;

// One row of pg_database that wants a worker.
struct DatabaseRow {
  Oid oid;
  NameData name;
};

// Lives for the launcher's life, in TopMemoryContext.
DatabaseMap* databases = nullptr;
bool warned_no_slot = false;

// Reads pg_database into a palloc'd array: connectable, non-template
// databases that pgq.databases lists.
int ScanDatabases(DatabaseRow** rows_out) {
  int count = 0;
  pg::Guard([&] {
    SetCurrentStatementStartTimestamp();
    StartTransactionCommand();
    PushActiveSnapshot(GetTransactionSnapshot());
    Relation rel = table_open(DatabaseRelationId, AccessShareLock);
    TableScanDesc scan = table_beginscan_catalog(rel, 0, nullptr);
    int capacity = 16;
    DatabaseRow* rows = static_cast<DatabaseRow*>(
        MemoryContextAlloc(TopMemoryContext, capacity * sizeof(DatabaseRow)));
    HeapTuple tuple;
    while ((tuple = heap_getnext(scan, ForwardScanDirection)) != nullptr) {
      auto* db = reinterpret_cast<Form_pg_database>(GETSTRUCT(tuple));
      if (!db->datallowconn || db->datistemplate) continue;
      if (!IsListedDatabase(NameStr(db->datname))) continue;
      if (count == capacity) {
        capacity *= 2;
        rows = static_cast<DatabaseRow*>(repalloc(rows, capacity * sizeof(DatabaseRow)));
      }
      rows[count].oid = db->oid;
      rows[count].name = db->datname;
      ++count;
    }
    table_endscan(scan);
    table_close(rel, AccessShareLock);
    PopActiveSnapshot();
    CommitTransactionCommand();
    *rows_out = rows;
  });
  return count;
}

// Takes the databases backends asked us to probe now.
void TakeProbeRequests(pg::SharedState* shared) {
  LWLockAcquire(shared->lock, LW_EXCLUSIVE);
  for (Oid& request : shared->probe_requests) {
    if (request == InvalidOid) continue;
    auto found = databases->find(request);
    if (found != databases->end()) {
      found->second.not_before = 0;
      found->second.without_extension = false;
    }
    request = InvalidOid;
  }
  if (shared->probe_all) {
    for (auto& [oid, db] : *databases) {
      if (db.without_extension) db.not_before = 0;
    }
    shared->probe_all = false;
  }
  LWLockRelease(shared->lock);
}

// Why the worker of `database` ended, and its slot freed for reuse.
pg::WorkerExit TakeExitReason(pg::SharedState* shared, Oid database) {
  pg::WorkerExit reason = pg::WorkerExit::kRunning;  // = it died without saying
  LWLockAcquire(shared->lock, LW_EXCLUSIVE);
  for (int i = 0; i < shared->worker_slot_count; ++i) {
    pg::WorkerSlot& slot = shared->workers[i];
    if (slot.database == database && slot.kind == pg::WorkerKind::kMaintenance && slot.pid == 0) {
      reason = slot.exit;
      slot.database = InvalidOid;
    }
  }
  LWLockRelease(shared->lock);
  return reason;
}

// Whether a worker for `database` runs that this launcher does not know of.
bool HasLiveWorker(pg::SharedState* shared, Oid database) {
  bool live = false;
  LWLockAcquire(shared->lock, LW_SHARED);
  for (int i = 0; i < shared->worker_slot_count; ++i) {
    const pg::WorkerSlot& slot = shared->workers[i];
    if (slot.database == database && slot.kind == pg::WorkerKind::kMaintenance && slot.pid != 0) {
      live = true;
    }
  }
  LWLockRelease(shared->lock);
  return live;
}

void StopWorker(Database& db) {
  if (db.handle == nullptr) return;
  TerminateBackgroundWorker(db.handle);
  pfree(db.handle);
  db.handle = nullptr;
}

// Watches a running worker; when it has stopped, decides when to start the
// next one from why it ended.
void Watch(pg::SharedState* shared, Oid oid, Database& db, TimestampTz now) {
  pid_t pid = 0;
  if (GetBackgroundWorkerPid(db.handle, &pid) != BGWH_STOPPED) return;
  pfree(db.handle);
  db.handle = nullptr;
  switch (TakeExitReason(shared, oid)) {
    case pg::WorkerExit::kNoExtension:
      db.without_extension = true;
      db.not_before = TimestampTzPlusMilliseconds(now, kProbeAgainMillis);
      break;
    case pg::WorkerExit::kPaused:
    case pg::WorkerExit::kNotListed:
      db.not_before = TimestampTzPlusMilliseconds(now, kScanMillis);
      break;
    case pg::WorkerExit::kRunning:
      // It failed (an error it could not get past, or it was terminated).
      db.quick_failures = TimestampDifferenceExceeds(db.started_at, now, kHealthyMillis)
                              ? 1
                              : db.quick_failures + 1;
      db.not_before = TimestampTzPlusMilliseconds(now, RestartDelayMillis(db.quick_failures));
      break;
  }
}

void Start(pg::SharedState* shared, Oid oid, Database& db, TimestampTz now) {
  if (db.not_before > now || pg::IsDatabasePaused(shared, oid, now)) return;
  if (HasLiveWorker(shared, oid)) return;
  db.handle = StartMaintenanceWorker(oid);
  if (db.handle == nullptr) {
    if (!warned_no_slot) {
      ereport(WARNING, (errmsg("pgq launcher could not start a maintenance worker"),
                        errdetail("No background worker slot is free."),
                        errhint("Raise max_worker_processes: pgq_cpp needs one worker per "
                                "database with the extension, plus its launcher.")));
      warned_no_slot = true;
    }
    db.not_before = TimestampTzPlusMilliseconds(now, kNoSlotRetryMillis);
    return;
  }
  db.started_at = now;
  warned_no_slot = false;
}

// One round: reconcile the running workers with the databases that want one.
// Returns how long to sleep: until the next scan, or sooner when a worker
// is due to be started again before then.
long Tick(pg::SharedState* shared) {
  DatabaseRow* rows = nullptr;
  const int count = ScanDatabases(&rows);
  const TimestampTz now = GetCurrentTimestamp();

  // Forget databases that were dropped or are no longer listed.
  for (auto it = databases->begin(); it != databases->end();) {
    bool wanted = false;
    for (int i = 0; i < count && !wanted; ++i) wanted = rows[i].oid == it->first;
    if (wanted) {
      ++it;
    } else {
      StopWorker(it->second);
      it = databases->erase(it);
    }
  }
  for (int i = 0; i < count; ++i) databases->try_emplace(rows[i].oid);
  pfree(rows);

  TakeProbeRequests(shared);
  long sleep_ms = kScanMillis;
  for (auto& [oid, db] : *databases) {
    if (db.handle != nullptr) Watch(shared, oid, db, now);
    if (db.handle == nullptr) Start(shared, oid, db, now);
    if (db.handle == nullptr && db.not_before > now) {
      const long due_ms = static_cast<long>((db.not_before - now + 999) / 1000);
      sleep_ms = std::min(sleep_ms, std::max(1L, due_ms));
    }
  }
  return sleep_ms;
}

void SetLauncherLatch(pg::SharedState* shared, Latch* latch) {
  LWLockAcquire(shared->lock, LW_EXCLUSIVE);
  shared->launcher_latch = latch;
  LWLockRelease(shared->lock);
}

void ForgetLauncherLatch(int, Datum) {
  if (pg::SharedState* shared = pg::Shared()) SetLauncherLatch(shared, nullptr);
}

}  // namespace

}  // namespace pgq::bgw

void pgq_launcher_main(Datum) {
  using namespace pgq;
  bgw::InitWorkerProcess();

  pg::SharedState* shared = pg::Shared();
  if (shared == nullptr) proc_exit(0);  // cannot happen: registered only when preloaded

  // No database: the launcher reads only the shared catalog pg_database.
  BackgroundWorkerInitializeConnection(nullptr, nullptr, 0);
  pgstat_report_appname(bgw::kLauncherName);
  bgw::SetLauncherLatch(shared, MyLatch);
  before_shmem_exit(bgw::ForgetLauncherLatch, 0);

  bgw::databases = static_cast<bgw::DatabaseMap*>(
      MemoryContextAlloc(TopMemoryContext, sizeof(bgw::DatabaseMap)));
  pg::AtBoundary([] {
    new (bgw::databases)
        bgw::DatabaseMap(pg::ContextAllocator<std::pair<Oid, bgw::Database>>(TopMemoryContext));
  });

  for (;;) {
    CHECK_FOR_INTERRUPTS();
    if (ConfigReloadPending) {
      ConfigReloadPending = false;
      ProcessConfigFile(PGC_SIGHUP);
    }
    long sleep_ms = bgw::kScanMillis;
    pg::AtBoundary([shared, &sleep_ms] { sleep_ms = bgw::Tick(shared); });
    (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, sleep_ms,
                    PG_WAIT_EXTENSION);
    ResetLatch(MyLatch);
  }
}
