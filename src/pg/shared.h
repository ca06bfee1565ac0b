// pgq_cpp's shared memory, present only when the library is loaded from
// shared_preload_libraries. Everything that uses it has a fallback for the
// case it is absent (Shared() returns nullptr): claim's wait polls, and
// maintenance is pgq.maintain() called by the application or pg_cron.
//
// It holds three small fixed tables, all behind one LWLock except the
// waiter slots (see pg/channel_wait.h), which are lock-free:
//  - the maintenance workers that run (database, pid, why the last one ended),
//    so that a backend about to DROP DATABASE can stop the worker first;
//  - databases whose worker must stay stopped for a moment (DROP DATABASE,
//    CREATE DATABASE .. TEMPLATE, ALTER DATABASE .. RENAME in progress);
//  - requests to the launcher to look at a database now (CREATE EXTENSION).
#pragma once

#include "pg/pg.h"

extern "C" {
#include "port/atomics.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
}

namespace pgq::pg {

// Why a maintenance worker ended; read by the launcher to decide whether and
// when to start it again.
enum class WorkerExit : uint32 {
  kRunning = 0,
  kNoExtension,  // the database has no pgq_cpp: probe again later or on request
  kPaused,       // asked to stay away (DROP DATABASE and friends)
  kNotListed,    // not in pgq.databases
};

enum class WorkerKind : uint32 {
  kMaintenance = 0,  // one per database, supervised by the launcher
  kHandler,          // pgq.handler_workers per database, started by its maintenance worker
};

struct WorkerSlot {
  Oid database;  // InvalidOid: free
  WorkerKind kind;
  // A handler worker's number in its database (1..pgq.handler_workers); 0
  // for a maintenance worker. INVARIANT: at most one live slot per
  // (database, kind, number): the cap on a database's workers, whoever
  // started them (bgw/worker_slot.h).
  int32 number;
  pid_t pid;
  WorkerExit exit;
  TimestampTz last_pass;  // end of the last pass that completed
};

struct PausedDatabase {
  Oid database;  // InvalidOid: free
  TimestampTz until;
};

inline constexpr int kMaxPausedDatabases = 16;
inline constexpr int kMaxProbeRequests = 16;

struct SharedState {
  LWLock* lock;
  LWLock* slots_lock;  // the queue slots' hash table (pg/queue_slots.h)
  // The launcher's latch, or nullptr while no launcher runs.
  Latch* launcher_latch;
  // Databases to probe at once; probe_all when more were asked than fit.
  Oid probe_requests[kMaxProbeRequests];
  bool probe_all;
  PausedDatabase paused[kMaxPausedDatabases];
  int worker_slot_count;
  WorkerSlot* workers;  // worker_slot_count entries

  // Waiters on a channel (pg/channel_wait.cpp): one slot per PGPROC of a regular backend.
  pg_atomic_uint32 waiter_count;
  int waiter_slot_count;
  pg_atomic_uint64* waiters;
};

// Hooks the shmem request and startup; called from _PG_init while
// shared_preload_libraries is being processed.
void RequestSharedState();

// The shared state, or nullptr when the library was not preloaded.
SharedState* Shared();

// Wakes the launcher (after writing a request for it).
void WakeLauncher(SharedState* shared);

// Asks the launcher to look at `database` now (it has just gained pgq_cpp).
void RequestProbe(Oid database);

// Keeps the maintenance worker of `database` stopped for `seconds` and stops
// the running one, so a statement that needs the database to itself (DROP
// DATABASE) does not wait for it.
void PauseDatabase(Oid database, int seconds);
void ResumeDatabase(Oid database);
bool IsDatabasePaused(SharedState* shared, Oid database, TimestampTz now);

}  // namespace pgq::pg
