// Background workers: one launcher per cluster, one maintenance worker per
// database that has pgq_cpp. See docs/operations.md for what they do and
// docs/adr/0005-background-workers.md for why they are built this way.
#pragma once

#include "pg/pg.h"

extern "C" {
#include "postmaster/bgworker.h"

PGDLLEXPORT void pgq_launcher_main(Datum main_arg);
PGDLLEXPORT void pgq_maintenance_main(Datum main_arg);
PGDLLEXPORT void pgq_handler_main(Datum main_arg);
}

namespace pgq::bgw {

// Registers the launcher with the postmaster; from _PG_init when preloaded.
void RegisterLauncher();

// Starts the maintenance worker of `database`, reporting to the calling
// process (the launcher); nullptr when no background worker slot is free.
BackgroundWorkerHandle* StartMaintenanceWorker(Oid database);

// Whether `name` is one of the databases pgq.databases lists (true when the
// setting is empty).
bool IsListedDatabase(const char* name);

// Starts handler worker `number` (1..pgq.handler_workers) of `database`,
// reporting to the calling process (its maintenance worker); nullptr when no
// slot is free.
BackgroundWorkerHandle* StartHandlerWorker(Oid database, int32 number);

// Installs the utility hook that keeps workers out of the way of statements
// that need a database to themselves, and tells the launcher about CREATE
// EXTENSION pgq_cpp; from _PG_init when preloaded.
void InstallDatabaseHooks();

// The start of every pgq worker's main: an uncaught C++ exception ends this
// worker only (FATAL), SIGHUP reloads settings, SIGTERM ends it; signals on.
void InitWorkerProcess();

// Registers a dynamic worker `function` (a pgq_*_main of this library) for
// `database`, worker `number` of its kind (WorkerNumber() in the worker),
// reporting to the calling process, which decides about restarts; nullptr
// when no background worker slot is free.
BackgroundWorkerHandle* StartDynamicWorker(const char* function, const char* type, Oid database,
                                           int32 number, const char* name);

// In a worker started by StartDynamicWorker: the number it was given.
int32 WorkerNumber();

// Application names, also what pg_stat_activity.backend_type shows.
inline constexpr const char* kLauncherName = "pgq launcher";
inline constexpr const char* kMaintenanceName = "pgq maintenance";
inline constexpr const char* kHandlerName = "pgq handler";

}  // namespace pgq::bgw
