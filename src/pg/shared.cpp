#include "pg/shared.h"

#include <csignal>

#include "pg/queue_slots.h"

extern "C" {
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
}

namespace pgq::pg {

namespace {

constexpr const char* kTrancheName = "pgq_cpp";

// Set in every process by the startup hook (the postmaster runs it, children
// inherit it); stays nullptr when the library was not preloaded.
SharedState* shared_state = nullptr;

shmem_request_hook_type prev_shmem_request_hook = nullptr;
shmem_startup_hook_type prev_shmem_startup_hook = nullptr;

// Maintenance workers are background workers, so there are never more of
// them than max_worker_processes.
int WorkerSlotCount() { return max_worker_processes; }

// Claim waiters are regular backends; their PGPROC numbers are below
// MaxBackends (auxiliary processes and prepared transactions come after).
int WaiterSlotCount() { return MaxBackends; }

Size SharedSize() {
  Size size = MAXALIGN(sizeof(SharedState));
  size = add_size(size, MAXALIGN(mul_size(WorkerSlotCount(), sizeof(WorkerSlot))));
  size = add_size(size, mul_size(WaiterSlotCount(), sizeof(pg_atomic_uint64)));
  return size;
}

Size TotalSize() { return add_size(SharedSize(), QueueSlotsSize()); }

void RequestShmem() {
  if (prev_shmem_request_hook != nullptr) prev_shmem_request_hook();
  RequestAddinShmemSpace(TotalSize());
  RequestNamedLWLockTranche(kTrancheName, 2);
}

void StartupShmem() {
  if (prev_shmem_startup_hook != nullptr) prev_shmem_startup_hook();
  LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
  bool found = false;
  auto* state = static_cast<SharedState*>(ShmemInitStruct("pgq_cpp", SharedSize(), &found));
  if (!found) {
    std::memset(state, 0, SharedSize());
    char* base = reinterpret_cast<char*>(state);
    Size offset = MAXALIGN(sizeof(SharedState));
    LWLockPadded* locks = GetNamedLWLockTranche(kTrancheName);
    state->lock = &locks[0].lock;
    state->slots_lock = &locks[1].lock;
    state->launcher_latch = nullptr;
    state->probe_all = false;
    state->worker_slot_count = WorkerSlotCount();
    state->workers = reinterpret_cast<WorkerSlot*>(base + offset);
    offset += MAXALIGN(mul_size(WorkerSlotCount(), sizeof(WorkerSlot)));
    pg_atomic_init_u32(&state->waiter_count, 0);
    state->waiter_slot_count = WaiterSlotCount();
    state->waiters = reinterpret_cast<pg_atomic_uint64*>(base + offset);
    for (int i = 0; i < state->waiter_slot_count; ++i) pg_atomic_init_u64(&state->waiters[i], 0);
  }
  InitQueueSlots();
  LWLockRelease(AddinShmemInitLock);
  shared_state = state;
}

}  // namespace

void RequestSharedState() {
  prev_shmem_request_hook = shmem_request_hook;
  shmem_request_hook = RequestShmem;
  prev_shmem_startup_hook = shmem_startup_hook;
  shmem_startup_hook = StartupShmem;
}

SharedState* Shared() { return shared_state; }

void WakeLauncher(SharedState* shared) {
  LWLockAcquire(shared->lock, LW_SHARED);
  if (shared->launcher_latch != nullptr) SetLatch(shared->launcher_latch);
  LWLockRelease(shared->lock);
}

void RequestProbe(Oid database) {
  SharedState* shared = Shared();
  if (shared == nullptr) return;
  LWLockAcquire(shared->lock, LW_EXCLUSIVE);
  bool stored = false;
  for (Oid& request : shared->probe_requests) {
    if (request == database || request == InvalidOid) {
      request = database;
      stored = true;
      break;
    }
  }
  if (!stored) shared->probe_all = true;
  if (shared->launcher_latch != nullptr) SetLatch(shared->launcher_latch);
  LWLockRelease(shared->lock);
}

void PauseDatabase(Oid database, int seconds) {
  SharedState* shared = Shared();
  if (shared == nullptr || database == InvalidOid) return;
  const TimestampTz now = GetCurrentTimestamp();
  const TimestampTz until = TimestampTzPlusMilliseconds(now, seconds * 1000);
  LWLockAcquire(shared->lock, LW_EXCLUSIVE);
  // Reuse this database's entry, else a free or expired one, else the one
  // that expires first.
  PausedDatabase* entry = &shared->paused[0];
  for (PausedDatabase& p : shared->paused) {
    if (p.database == database) {
      entry = &p;
      break;
    }
    if (p.database == InvalidOid || p.until < now || p.until < entry->until) entry = &p;
  }
  entry->database = database;
  entry->until = until;
  for (int i = 0; i < shared->worker_slot_count; ++i) {
    WorkerSlot& slot = shared->workers[i];
    if (slot.database != database || slot.pid == 0) continue;
    // SIGTERM makes the worker exit at its next interrupt check; it is never
    // inside a long statement (each batch is bounded). The launcher reads
    // the reason and starts it again as soon as the pause ends.
    slot.exit = WorkerExit::kPaused;
    (void)kill(slot.pid, SIGTERM);
  }
  LWLockRelease(shared->lock);
}

void ResumeDatabase(Oid database) {
  SharedState* shared = Shared();
  if (shared == nullptr) return;
  LWLockAcquire(shared->lock, LW_EXCLUSIVE);
  for (PausedDatabase& p : shared->paused) {
    if (p.database == database) p.database = InvalidOid;
  }
  if (shared->launcher_latch != nullptr) SetLatch(shared->launcher_latch);
  LWLockRelease(shared->lock);
}

bool IsDatabasePaused(SharedState* shared, Oid database, TimestampTz now) {
  bool paused = false;
  LWLockAcquire(shared->lock, LW_SHARED);
  for (const PausedDatabase& p : shared->paused) {
    if (p.database == database && p.until > now) paused = true;
  }
  LWLockRelease(shared->lock);
  return paused;
}

}  // namespace pgq::pg
