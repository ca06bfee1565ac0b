#include "pg/channel_wait.h"

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

// Without shared memory a waiter looks again this often.
constexpr long kPollMillis = 10;

// This backend's slot: whether it is published, and with which channel.
bool slot_published = false;
uint32 published_key = 0;

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

// Publishes this backend's slot for `key`, unless it is published for it
// already; false without shared memory.
bool Publish(uint32 key) {
  SharedState* shared = Shared();
  if (shared == nullptr) return false;
  pg_atomic_uint64* slot = OwnSlot(shared);
  if (slot == nullptr) return false;
  if (slot_published && published_key == key) return true;
  if (!exit_hook_registered) {
    // A process that exits while waiting (terminated outside a transaction)
    // must not leave its slot behind.
    before_shmem_exit(UnpublishAtExit, 0);
    exit_hook_registered = true;
  }
  Unpublish();  // a slot left by an earlier wait
  pg_atomic_fetch_add_u32(&shared->waiter_count, 1);
  pg_atomic_write_u64(slot, (static_cast<uint64>(MyDatabaseId) << 32) | key);
  slot_published = true;
  published_key = key;
  return true;
}

// Publish, then reset the latch: a wake-up from here on is kept.
bool ArmSlot(Channel channel) {
  const bool shared = Publish(channel.key());
  ResetLatch(MyLatch);
  // INVARIANT: the slot is visible before the caller's next snapshot.
  pg_memory_barrier();
  return shared;
}

}  // namespace

Channel Channel::Queues(const int32* queue_ids, int count) {
  if (count == 1) return Queue(queue_ids[0]);
  uint32 mask = 0;
  for (int i = 0; i < count; ++i) mask |= SetBit(queue_ids[i]);
  return Channel(ChannelKind::kQueueSet, mask);
}

bool Channel::Wakes(uint32 key, ChannelKind kind, int32 id) {
  const uint32 low = key & kIdMask;
  switch (static_cast<ChannelKind>(key >> 30)) {
    case ChannelKind::kQueue:
      return kind == ChannelKind::kQueue && low == Low(id);
    case ChannelKind::kStream:
      return kind == ChannelKind::kStream && low == Low(id);
    case ChannelKind::kQueueSet:
      return kind == ChannelKind::kQueue && (low & SetBit(id)) != 0;
    case ChannelKind::kAnyQueue:
      return kind == ChannelKind::kQueue;
  }
  return true;
}

ChannelWaiter::~ChannelWaiter() {
  if (armed_) Unpublish();
}

void ChannelWaiter::Arm(Channel channel) { armed_ = ArmSlot(channel); }

void ChannelWaiter::Sleep(long max_millis) {
  const long millis = armed_ ? max_millis : std::min(max_millis, kPollMillis);
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

void ArmWaiter(Channel channel) { (void)ArmSlot(channel); }

void WakeChannels(ChannelKind kind, const int32* ids, int count, bool whole_database) {
  SharedState* shared = Shared();
  if (shared == nullptr) return;
  // INVARIANT: the commit is visible before the slots are read (see header).
  pg_memory_barrier();
  if (pg_atomic_read_u32(&shared->waiter_count) == 0) return;
  for (int i = 0; i < shared->waiter_slot_count; ++i) {
    const uint64 slot = pg_atomic_read_u64(&shared->waiters[i]);
    if (slot == 0 || static_cast<Oid>(slot >> 32) != MyDatabaseId) continue;
    const auto key = static_cast<uint32>(slot);
    bool wake = whole_database;
    for (int c = 0; c < count && !wake; ++c) wake = Channel::Wakes(key, kind, ids[c]);
    if (wake) SetLatch(&ProcGlobal->allProcs[i].procLatch);
  }
}

void ForgetWaiter() { Unpublish(); }

}  // namespace pgq::pg
