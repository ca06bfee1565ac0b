#include "bgw/worker_slot.h"

#include <algorithm>
#include <csignal>

extern "C" {
#include "commands/dbcommands.h"
#include "storage/ipc.h"
}

namespace pgq::bgw {

namespace {

// This worker's slot in shared memory.
pg::WorkerSlot* own_slot = nullptr;

// On exit, whatever the cause: the slot keeps the database and the reason
// for the launcher, and frees the pid.
void ReleaseSlot(int, Datum) {
  pg::SharedState* shared = pg::Shared();
  if (shared == nullptr || own_slot == nullptr) return;
  LWLockAcquire(shared->lock, LW_EXCLUSIVE);
  own_slot->pid = 0;
  LWLockRelease(shared->lock);
}

// Whether the slot's worker still runs.
bool IsLive(const pg::WorkerSlot& slot) { return slot.pid != 0 && kill(slot.pid, 0) == 0; }

}  // namespace

// A slot whose worker is gone is free: for a maintenance worker its own
// database's first, since the launcher may not have read the reason left
// there yet; then one never used (or freed by the launcher); then any other
// (the reason of a database the launcher forgot, dropped say, is never read).
bool TakeSlot(Oid database, pg::WorkerKind kind, int32 number) {
  pg::SharedState* shared = pg::Shared();
  if (shared == nullptr) return false;
  const bool maintenance = kind == pg::WorkerKind::kMaintenance;
  bool taken = false;
  LWLockAcquire(shared->lock, LW_EXCLUSIVE);
  pg::WorkerSlot* own_database = nullptr;
  pg::WorkerSlot* unused = nullptr;
  bool duplicate = false;
  for (int i = 0; i < shared->worker_slot_count; ++i) {
    pg::WorkerSlot& slot = shared->workers[i];
    const bool same = slot.database == database && slot.kind == kind;
    if (IsLive(slot)) {
      if (same && slot.number == number) duplicate = true;
      continue;
    }
    if (same && maintenance) own_database = &slot;
    if (unused == nullptr || (unused->database != InvalidOid && slot.database == InvalidOid)) {
      unused = &slot;
    }
  }
  pg::WorkerSlot* slot = own_database != nullptr ? own_database : unused;
  if (!duplicate && slot != nullptr) {
    slot->database = database;
    slot->kind = kind;
    slot->number = number;
    slot->pid = MyProcPid;
    slot->exit = pg::WorkerExit::kRunning;
    slot->last_pass = 0;
    own_slot = slot;
    taken = true;
  }
  LWLockRelease(shared->lock);
  if (taken) on_shmem_exit(ReleaseSlot, 0);
  return taken;
}

void LiveWorkers(Oid database, pg::WorkerKind kind, pid_t* pids, int count) {
  std::fill(pids, pids + count, 0);
  pg::SharedState* shared = pg::Shared();
  LWLockAcquire(shared->lock, LW_SHARED);
  for (int i = 0; i < shared->worker_slot_count; ++i) {
    const pg::WorkerSlot& slot = shared->workers[i];
    if (slot.database != database || slot.kind != kind) continue;
    if (slot.number < 1 || slot.number > count || !IsLive(slot)) continue;
    pids[slot.number - 1] = slot.pid;
  }
  LWLockRelease(shared->lock);
}

void ExitBecause(pg::WorkerExit reason) {
  pg::SharedState* shared = pg::Shared();
  LWLockAcquire(shared->lock, LW_EXCLUSIVE);
  own_slot->exit = reason;
  LWLockRelease(shared->lock);
  proc_exit(0);
}

char* DatabaseName() {
  StartTransactionCommand();
  char* name = get_database_name(MyDatabaseId);
  char* copy = MemoryContextStrdup(TopMemoryContext, name != nullptr ? name : "?");
  CommitTransactionCommand();
  return copy;
}

void RecordPass() {
  pg::SharedState* shared = pg::Shared();
  LWLockAcquire(shared->lock, LW_EXCLUSIVE);
  own_slot->last_pass = GetCurrentTimestamp();
  LWLockRelease(shared->lock);
}

}  // namespace pgq::bgw
