#include "pg/wakeup.h"

#include <algorithm>

#include "pg/boundary.h"
#include "pg/shared.h"

extern "C" {
#include "libpq/libpq-be.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "utils/wait_event.h"
}

namespace pgq::pg {

namespace {

// Without shared memory a waiting claim looks again this often.
constexpr long kPollMillis = 10;

// Whether this backend's waiter slot is published.
bool slot_published = false;

// A waiter for several queues (a multi-queue claim) publishes, instead of a
// queue id, this bit and one bit per queue id modulo 31: woken by any of
// them, and now and then by another queue whose id shares a bit.
constexpr uint32 kQueueSetBit = 0x80000000u;
constexpr int kQueueSetBits = 31;

uint32 QueueSetBit(int32 queue_id) { return 1u << (static_cast<uint32>(queue_id) % kQueueSetBits); }

bool KeyWakesFor(uint64 key, int32 queue_id) {
  const auto low = static_cast<uint32>(key);
  if ((low & kQueueSetBit) != 0) return (low & QueueSetBit(queue_id)) != 0;
  return low == static_cast<uint32>(queue_id);
}

pg_atomic_uint64* OwnSlot(SharedState* shared) {
  if (MyProc == nullptr || MyProc->pgprocno >= shared->waiter_slot_count) return nullptr;
  return &shared->waiters[MyProc->pgprocno];
}

bool exit_hook_registered = false;

void Unpublish() {
  if (!slot_published) return;
  SharedState* shared = Shared();
  pg_atomic_write_u64(OwnSlot(shared), 0);
  pg_atomic_fetch_sub_u32(&shared->waiter_count, 1);
  slot_published = false;
}

void UnpublishAtExit(int, Datum) { Unpublish(); }

// Publishes this backend's slot for `queue_id` (or a set of queues,
// QueueSetKey); false without shared memory.
bool Publish(uint32 queue_key) {
  SharedState* shared = Shared();
  if (shared == nullptr) return false;
  pg_atomic_uint64* slot = OwnSlot(shared);
  if (slot == nullptr) return false;
  if (!exit_hook_registered) {
    // A process that exits while waiting (terminated outside a transaction)
    // must not leave its slot behind.
    before_shmem_exit(UnpublishAtExit, 0);
    exit_hook_registered = true;
  }
  Unpublish();  // a slot left by an earlier wait
  pg_atomic_fetch_add_u32(&shared->waiter_count, 1);
  pg_atomic_write_u64(slot, (static_cast<uint64>(MyDatabaseId) << 32) | queue_key);
  slot_published = true;
  return true;
}

}  // namespace

void PublishWaiter(int32 queue_id) {
  (void)Publish(static_cast<uint32>(queue_id));
  ResetLatch(MyLatch);
  // INVARIANT: the slot is visible before the caller's next snapshot.
  pg_memory_barrier();
}

void WakeWaiters(const int32* queue_ids, int count, bool whole_database) {
  SharedState* shared = Shared();
  if (shared == nullptr) return;
  // INVARIANT: the commit is visible before the slots are read (see header).
  pg_memory_barrier();
  if (pg_atomic_read_u32(&shared->waiter_count) == 0) return;
  for (int i = 0; i < shared->waiter_slot_count; ++i) {
    const uint64 key = pg_atomic_read_u64(&shared->waiters[i]);
    if (key == 0 || static_cast<Oid>(key >> 32) != MyDatabaseId) continue;
    // Queue id 0: a waiter for any queue of the database (handler workers).
    bool wake = whole_database || static_cast<uint32>(key) == 0;
    for (int q = 0; q < count && !wake; ++q) wake = KeyWakesFor(key, queue_ids[q]);
    if (wake) SetLatch(&ProcGlobal->allProcs[i].procLatch);
  }
}

void UnpublishWaiter() { Unpublish(); }

ClaimWaiter::ClaimWaiter(int32 queue_id) : shared_(Publish(static_cast<uint32>(queue_id))) {}

ClaimWaiter::ClaimWaiter(const int32* queue_ids, int count)
    : shared_(Publish([&] {
        uint32 key = kQueueSetBit;
        for (int i = 0; i < count; ++i) key |= QueueSetBit(queue_ids[i]);
        return key;
      }())) {}

ClaimWaiter::~ClaimWaiter() {
  if (shared_) Unpublish();
}

void ClaimWaiter::Arm() {
  ResetLatch(MyLatch);
  // INVARIANT: the slot is visible before the claim's snapshot (see header).
  pg_memory_barrier();
}

void ClaimWaiter::Sleep(long max_millis) {
  const long millis = shared_ ? max_millis : std::min(max_millis, kPollMillis);
  Guard([&] {
    // A client gone while its claim waits ends the session now, as
    // client_connection_check_interval would: otherwise the claim would
    // take the next job for nobody and hold it a whole lease.
    int events = WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH;
    pgsocket client = PGINVALID_SOCKET;
    if (MyProcPort != nullptr && WaitEventSetCanReportClosed()) {
      events |= WL_SOCKET_CLOSED;
      client = MyProcPort->sock;
    }
    const int happened =
        WaitLatchOrSocket(MyLatch, events, client, millis > 0 ? millis : 1, PG_WAIT_EXTENSION);
    if ((happened & WL_SOCKET_CLOSED) != 0) {
      ClientConnectionLost = true;
      InterruptPending = true;
    }
    CHECK_FOR_INTERRUPTS();
  });
}

}  // namespace pgq::pg
