// What every pgq background worker shares: registering and starting one,
// the process set-up at the start of its main, and pgq.databases.
#include <exception>

#include "bgw/bgw.h"
#include "pg/settings.h"

extern "C" {
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "tcop/tcopprot.h"
#include "utils/varlena.h"
}

namespace pgq::bgw {

namespace {

[[noreturn]] void TerminateOnUncaught() {
  // One worker restarts, not the cluster (STYLE.md).
  ereport(FATAL, (errcode(ERRCODE_INTERNAL_ERROR),
                  errmsg("pgq_cpp background worker: uncaught C++ exception")));
  pg_unreachable();
}

}  // namespace

void InitWorkerProcess() {
  std::set_terminate(TerminateOnUncaught);
  pqsignal(SIGHUP, SignalHandlerForConfigReload);
  pqsignal(SIGTERM, die);
  BackgroundWorkerUnblockSignals();
  // A reload that raced our start is lost: the postmaster may have forked us
  // before reading the files, and PostgreSQL ignores SIGHUP in a background
  // worker until we set our handler above. Read them once now, in the loop.
  ConfigReloadPending = true;
}

bool IsListedDatabase(const char* name) {
  const char* setting = pg::DatabasesSetting();
  if (setting[0] == '\0') return true;
  // SplitIdentifierString scribbles on its input and allocates the list.
  char* copy = pstrdup(setting);
  List* names = nullptr;
  bool listed = false;
  if (SplitIdentifierString(copy, ',', &names)) {
    ListCell* cell;
    foreach (cell, names) {
      if (strcmp(static_cast<const char*>(lfirst(cell)), name) == 0) listed = true;
    }
  }
  list_free(names);
  pfree(copy);
  return listed;
}

void RegisterLauncher() {
  BackgroundWorker worker;
  std::memset(&worker, 0, sizeof(worker));
  worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
  worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
  worker.bgw_restart_time = 1;
  std::snprintf(worker.bgw_library_name, BGW_MAXLEN, "pgq_cpp");
  std::snprintf(worker.bgw_function_name, BGW_MAXLEN, "pgq_launcher_main");
  std::snprintf(worker.bgw_name, BGW_MAXLEN, "%s", kLauncherName);
  std::snprintf(worker.bgw_type, BGW_MAXLEN, "%s", kLauncherName);
  RegisterBackgroundWorker(&worker);
}

BackgroundWorkerHandle* StartDynamicWorker(const char* function, const char* type, Oid database,
                                           int32 number, const char* name) {
  BackgroundWorker worker;
  std::memset(&worker, 0, sizeof(worker));
  worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
  worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
  worker.bgw_restart_time = BGW_NEVER_RESTART;  // the caller decides
  worker.bgw_notify_pid = MyProcPid;
  worker.bgw_main_arg = ObjectIdGetDatum(database);
  static_assert(sizeof(number) <= BGW_EXTRALEN);
  std::memcpy(worker.bgw_extra, &number, sizeof(number));
  std::snprintf(worker.bgw_library_name, BGW_MAXLEN, "pgq_cpp");
  std::snprintf(worker.bgw_function_name, BGW_MAXLEN, "%s", function);
  std::snprintf(worker.bgw_name, BGW_MAXLEN, "%s", name);
  std::snprintf(worker.bgw_type, BGW_MAXLEN, "%s", type);
  MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
  BackgroundWorkerHandle* handle = nullptr;
  if (!RegisterDynamicBackgroundWorker(&worker, &handle)) handle = nullptr;
  MemoryContextSwitchTo(old);
  return handle;
}

BackgroundWorkerHandle* StartMaintenanceWorker(Oid database) {
  char name[BGW_MAXLEN];
  std::snprintf(name, sizeof(name), "%s for database %u", kMaintenanceName, database);
  return StartDynamicWorker("pgq_maintenance_main", kMaintenanceName, database, 0, name);
}

int32 WorkerNumber() {
  int32 number = 0;
  std::memcpy(&number, MyBgworkerEntry->bgw_extra, sizeof(number));
  return number;
}

}  // namespace pgq::bgw
