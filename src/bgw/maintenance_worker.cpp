// The maintenance worker: one per database with pgq_cpp, started by the
// launcher. Every pgq.maintenance_interval it runs the pass of
// pgq.maintain(), one short transaction per bounded batch, and logs one line
// when the pass did something.
//
// It ends (and tells the launcher why, in its shared slot) when the database
// has no pgq_cpp (never installed, or DROP EXTENSION), when pgq.databases no
// longer lists it, or when a backend needs the database to itself (DROP
// DATABASE: SIGTERM, see bgw/database_hooks.cpp).
#include <algorithm>
#include <csignal>

#include "bgw/bgw.h"
#include "bgw/worker_slot.h"
#include "pg/boundary.h"
#include "pg/catalog_version.h"
#include "pg/settings.h"
#include "pg/shared.h"
#include "pg/spi.h"
#include "service/compact.h"
#include "service/maintain.h"
#include "store/queues.h"

extern "C" {
#include "catalog/pg_extension.h"
#include "commands/extension.h"
#include "pgstat.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/lmgr.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/snapmgr.h"
#include "utils/wait_event.h"
}

namespace pgq::bgw {

namespace {

constexpr long kMaxErrorBackoffMillis = 60 * 1000;

// Whether some queue has a handler, as of the last batch.
bool wants_handlers = false;

// The handler workers this worker started (pgq.handler_workers at most).
constexpr int kMaxHandlerWorkers = 64;
BackgroundWorkerHandle* handler_workers[kMaxHandlerWorkers];

bool HasHandlerQueues() {
  pg::SpiSession spi;
  return store::HasHandlerQueues(spi);
}

// Keeps handler workers 1..pgq.handler_workers running while some queue has
// a handler, and no other. The shared worker slots are the truth, not the
// handles: a worker started by this process's predecessor (killed, or
// restarted) is adopted, never doubled, and stopped like ours when it is
// not wanted (TakeSlot refuses a second worker of one number anyway). They
// also stop by themselves when no queue has a handler (or the extension
// goes).
void SuperviseHandlerWorkers(Oid database) {
  const int wanted = wants_handlers ? std::min(pg::HandlerWorkers(), kMaxHandlerWorkers) : 0;
  pid_t live[kMaxHandlerWorkers];
  LiveWorkers(database, pg::WorkerKind::kHandler, live, kMaxHandlerWorkers);
  for (int i = 0; i < kMaxHandlerWorkers; ++i) {
    BackgroundWorkerHandle*& handle = handler_workers[i];
    pid_t pid = 0;
    if (handle != nullptr && GetBackgroundWorkerPid(handle, &pid) == BGWH_STOPPED) {
      pfree(handle);
      handle = nullptr;
    }
    if (i < wanted) {
      if (handle == nullptr && live[i] == 0) handle = StartHandlerWorker(database, i + 1);
    } else if (handle != nullptr) {
      TerminateBackgroundWorker(handle);
    } else if (live[i] != 0) {
      (void)kill(live[i], SIGTERM);  // a predecessor's, no longer wanted
    }
  }
}

// Worker transactions.
// INVARIANT: no C++ object with a destructor lives in these frames; an error
// longjmps out of them into the caller's PG_TRY.

// Starts a worker transaction; returns whether pgq_cpp is installed.
bool BeginWorkerTransaction(const char* activity) {
  SetCurrentStatementStartTimestamp();
  StartTransactionCommand();
  PushActiveSnapshot(GetTransactionSnapshot());
  pgstat_report_activity(STATE_RUNNING, activity);
  // DROP EXTENSION locks the extension before any of its tables; so do we,
  // in the same order, so the two never deadlock (and a drop waits for this
  // short transaction). Looked up again once locked: it may have gone.
  const Oid extension = get_extension_oid("pgq_cpp", true);
  if (OidIsValid(extension)) LockDatabaseObject(ExtensionRelationId, extension, 0, AccessShareLock);
  return OidIsValid(extension) && get_extension_oid("pgq_cpp", true) == extension;
}

void CommitWorkerTransaction() {
  PopActiveSnapshot();
  CommitTransactionCommand();
  pgstat_report_stat(false);
  pgstat_report_activity(STATE_IDLE, nullptr);
}

// One batch in its own transaction; false when pgq_cpp is not installed.
bool RunBatchTransaction(TimestampTz now, service::PassCounts* counts, bool* more) {
  const bool installed = BeginWorkerTransaction("pgq maintenance pass");
  // A catalog older than the library (before ALTER EXTENSION pgq_cpp
  // UPDATE): no batch, the next pass looks again (ADR 0024).
  if (installed && pg::CatalogIsCurrent("pgq maintenance worker")) {
    pg::AtBoundary([&] {
      *counts += service::RunMaintenanceBatch(now, more);
      wants_handlers = HasHandlerQueues();
    });
  }
  CommitWorkerTransaction();
  return installed;
}

// How often the worker looks whether pgq.job_rows needs compacting (ADR 0008):
// a rewrite invalidates every session's plans on the table, so not at each
// pass; a hold of minutes still grows it by at most this much traffic.
constexpr int64 kCompactCheckMicros = 10 * USECS_PER_SEC;
constexpr int64 kCompactTooBigPauseMicros = 5 * 60 * USECS_PER_SEC;
TimestampTz next_compact_check = 0;

// Compacts pgq.job_rows in its own short transaction when it is worth it.
void RunCompactionTransaction(const char* database_name) {
  service::CompactResult result;
  if (BeginWorkerTransaction("pgq compaction check") &&
      pg::CatalogIsCurrent("pgq maintenance worker")) {
    pg::AtBoundary([&] { result = service::MaybeCompactJobs(); });
  }
  CommitWorkerTransaction();
  // The rings' key tables, in a transaction of their own (pgq.job_rows'
  // lock is not held meanwhile).
  int holds = 0;
  if (BeginWorkerTransaction("pgq compaction check") &&
      pg::CatalogIsCurrent("pgq maintenance worker")) {
    pg::AtBoundary([&] { holds = service::MaybeCompactHolds(); });
  }
  CommitWorkerTransaction();
  if (holds > 0) {
    ereport(DEBUG1, (errmsg("pgq compacted %d key table(s) of the rings in database \"%s\"", holds,
                            database_name)));
  }
  if (result.outcome == service::CompactOutcome::kCompacted) {
    ereport(LOG, (errmsg("pgq compacted pgq.job_rows in database \"%s\": %lld live jobs kept, "
                         "%lld kB -> %lld kB",
                         database_name, static_cast<long long>(result.jobs),
                         static_cast<long long>(result.bytes_before / 1024),
                         static_cast<long long>(result.bytes_after / 1024))));
  } else if (result.outcome == service::CompactOutcome::kTooBig) {
    // The statistics said "mostly dead" but the rows are live (counters
    // reset by a crash, say): leave the table to VACUUM for a while.
    next_compact_check = GetCurrentTimestamp() + kCompactTooBigPauseMicros;
    ereport(DEBUG1,
            (errmsg("pgq compaction of pgq.job_rows in database \"%s\" paused: too many live jobs",
                    database_name)));
  } else if (result.outcome == service::CompactOutcome::kNotNeeded) {
    ereport(DEBUG2,
            (errmsg("pgq compaction of pgq.job_rows in database \"%s\" not needed (%lld kB)",
                    database_name, static_cast<long long>(result.bytes_before / 1024))));
  } else if (result.outcome == service::CompactOutcome::kBusy) {
    ereport(DEBUG1, (errmsg("pgq compaction of pgq.job_rows in database \"%s\" skipped: table busy",
                            database_name)));
  }
}

// Runs one pass; returns false if it failed with an error (logged).
bool RunPass(service::PassCounts* counts, bool* installed, const char* database_name) {
  // volatile: read after a longjmp back into this frame.
  volatile bool ok = true;
  MemoryContext pass_context = CurrentMemoryContext;
  PG_TRY();
  {
    const TimestampTz now = pg::Now();
    bool more = true;
    while (more && *installed) {
      more = false;
      *installed = RunBatchTransaction(now, counts, &more);
      CHECK_FOR_INTERRUPTS();
    }
    // (A check far in the future means the clock went back: check now.)
    const TimestampTz wall = GetCurrentTimestamp();
    if (*installed &&
        (wall >= next_compact_check || next_compact_check - wall > kCompactTooBigPauseMicros)) {
      next_compact_check = wall + kCompactCheckMicros;
      RunCompactionTransaction(database_name);
    }
  }
  PG_CATCH();
  {
    HOLD_INTERRUPTS();
    MemoryContextSwitchTo(pass_context);
    EmitErrorReport();
    AbortCurrentTransaction();
    FlushErrorState();
    pgstat_report_activity(STATE_IDLE, nullptr);
    RESUME_INTERRUPTS();
    ok = false;
  }
  PG_END_TRY();
  return ok;
}

}  // namespace

}  // namespace pgq::bgw

void pgq_maintenance_main(Datum main_arg) {
  using namespace pgq;
  const Oid database = DatumGetObjectId(main_arg);
  bgw::InitWorkerProcess();

  pg::SharedState* shared = pg::Shared();
  if (!bgw::TakeSlot(database, pg::WorkerKind::kMaintenance, 0)) proc_exit(0);
  // Registered before the check, so a pause that comes after it sees our
  // pid and stops us (see pg::PauseDatabase).
  if (pg::IsDatabasePaused(shared, database, GetCurrentTimestamp())) {
    bgw::ExitBecause(pg::WorkerExit::kPaused);
  }

  BackgroundWorkerInitializeConnectionByOid(database, InvalidOid, 0);
  pgstat_report_appname(bgw::kMaintenanceName);
  const char* name = bgw::DatabaseName();
  if (!bgw::IsListedDatabase(name)) bgw::ExitBecause(pg::WorkerExit::kNotListed);

  long error_backoff = 0;
  bool announced = false;
  for (;;) {
    CHECK_FOR_INTERRUPTS();
    if (ConfigReloadPending) {
      ConfigReloadPending = false;
      ProcessConfigFile(PGC_SIGHUP);
      if (!bgw::IsListedDatabase(name)) bgw::ExitBecause(pg::WorkerExit::kNotListed);
    }

    service::PassCounts counts;
    bool installed = true;
    const bool ok = bgw::RunPass(&counts, &installed, name);
    if (!installed) {
      ereport(DEBUG1,
              (errmsg("pgq maintenance worker exiting: database \"%s\" has no pgq_cpp", name)));
      bgw::ExitBecause(pg::WorkerExit::kNoExtension);
    }
    if (!announced) {
      ereport(LOG, (errmsg("pgq maintenance worker started for database \"%s\"", name)));
      announced = true;
    }
    if (counts.DidWork()) {
      ereport(LOG, (errmsg("pgq maintenance in database \"%s\": %lld expired leases requeued, "
                           "%lld dead-lettered, %lld finished rows dropped, %lld schedules fired",
                           name, static_cast<long long>(counts.expired_requeued),
                           static_cast<long long>(counts.expired_dead),
                           static_cast<long long>(counts.finished_dropped),
                           static_cast<long long>(counts.schedules_fired))));
    }

    long sleep_ms = pg::MaintenanceIntervalMillis();
    if (ok) {
      error_backoff = 0;
      bgw::RecordPass();
      bgw::SuperviseHandlerWorkers(database);
    } else {
      // The error is logged; try again later, backing off while it repeats.
      error_backoff = error_backoff == 0 ? sleep_ms : error_backoff * 2;
      if (error_backoff > bgw::kMaxErrorBackoffMillis) error_backoff = bgw::kMaxErrorBackoffMillis;
      sleep_ms = std::max(sleep_ms, error_backoff);
    }
    (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, sleep_ms,
                    PG_WAIT_EXTENSION);
    ResetLatch(MyLatch);
  }
}
