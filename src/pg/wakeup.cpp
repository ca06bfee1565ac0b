#include "pg/wakeup.h"

#include <algorithm>

#include "pg/boundary.h"
#include "pg/queue_slots.h"
#include "pg/settings.h"
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

// Queues whose waiters the current transaction will wake at commit. A
// transaction that readies jobs in more queues than this wakes every waiter
// of its database instead (a spurious wake-up costs one empty claim).
constexpr int kMaxNotedQueues = 8;
int32 noted_queues[kMaxNotedQueues];
int noted_count = 0;
bool noted_database = false;

// Claim hints to update at commit, one entry per queue: the earliest key of
// the jobs it made pending that were due when noted, and the alarm of those
// that were not. A transaction that makes jobs pending in more queues than
// this resets the hints of its database instead.
struct Lowering {
  QueueSlot* slot;
  bool has_due;
  core::ClaimKey due;
  core::ClaimAlarm later;
};
Lowering lowerings[kMaxNotedQueues];
int lowering_count = 0;
bool reset_hints = false;

// What to count at commit, per queue slot: completions for done_recent
// (NoteFinished) and the counters of pgq.metrics() (NoteCount).
struct Counted {
  QueueSlot* slot;
  uint64 finished;
  QueueCounts counts;
};
Counted counted[kMaxNotedQueues];
int counted_count = 0;

// Completion counts this transaction wrote to pgq.finished, per slot it
// marked (FlushFinishedCounts): subtracted at commit, unmarked either way.
struct Flush {
  QueueSlot* slot;
  uint64 written;
};
Flush flushes[kMaxFlushes];
int flush_count = 0;

// Hints to reset unless this transaction commits (NoteResetOnAbort).
QueueSlot* reset_on_abort[kMaxNotedQueues];
int reset_on_abort_count = 0;
bool reset_on_abort_overflow = false;

// Whether this backend's waiter slot is published.
bool slot_published = false;

uint64 WaiterKey(Oid database, int32 queue_id) {
  return (static_cast<uint64>(database) << 32) | static_cast<uint32>(queue_id);
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

// Runs in the commit callback, where nothing may raise an error.
void WakeNotedWaiters() {
  SharedState* shared = Shared();
  // INVARIANT: the commit is visible before the slots are read (see header).
  pg_memory_barrier();
  if (pg_atomic_read_u32(&shared->waiter_count) == 0) return;
  for (int i = 0; i < shared->waiter_slot_count; ++i) {
    const uint64 key = pg_atomic_read_u64(&shared->waiters[i]);
    if (key == 0 || static_cast<Oid>(key >> 32) != MyDatabaseId) continue;
    // Queue id 0: a waiter for any queue of the database (handler workers).
    bool wake = noted_database || static_cast<uint32>(key) == 0;
    for (int q = 0; q < noted_count && !wake; ++q) {
      wake = key == WaiterKey(MyDatabaseId, noted_queues[q]);
    }
    if (wake) SetLatch(&ProcGlobal->allProcs[i].procLatch);
  }
}

// Runs in the commit callback: after the commit is visible (the invariant
// of core/claim_hint.h), before waking anyone.
void LowerNotedHints() {
  if (reset_hints) {
    ResetDatabaseSlots(false);
    return;
  }
  for (int i = 0; i < lowering_count; ++i) {
    const Lowering& l = lowerings[i];
    UpdateClaimHint(l.slot, l.has_due ? &l.due : nullptr, l.later);
  }
}

void ResetHintsOfLockedQueues() {
  if (reset_on_abort_overflow) {
    ResetDatabaseSlots(false);
    return;
  }
  for (int i = 0; i < reset_on_abort_count; ++i) ResetQueueHint(reset_on_abort[i]);
}

void AddCounted() {
  for (int i = 0; i < counted_count; ++i) {
    if (counted[i].finished > 0) AddFinished(counted[i].slot, counted[i].finished);
    AddCounts(counted[i].slot, counted[i].counts);
  }
}

void EndFlushes(bool committed) {
  for (int i = 0; i < flush_count; ++i) EndFlush(flushes[i].slot, flushes[i].written, committed);
  flush_count = 0;
}

// This transaction's entry for `queue_id`, or nullptr without shared memory,
// a slot, or room (kMaxNotedQueues queues).
Counted* CountedEntry(int32 queue_id) {
  if (Shared() == nullptr) return nullptr;
  QueueSlot* slot = FindQueueSlot(queue_id);
  if (slot == nullptr) return nullptr;
  for (int i = 0; i < counted_count; ++i) {
    if (counted[i].slot == slot) return &counted[i];
  }
  if (counted_count == kMaxNotedQueues) return nullptr;
  counted[counted_count] = Counted{slot, 0, QueueCounts{}};
  return &counted[counted_count++];
}

void ForgetNotes() {
  noted_count = 0;
  noted_database = false;
  lowering_count = 0;
  reset_hints = false;
  reset_on_abort_count = 0;
  reset_on_abort_overflow = false;
  counted_count = 0;
  flush_count = 0;
}

void OnSubTransactionEnd(SubXactEvent event, SubTransactionId, SubTransactionId, void*) {
  // Rows claimed or removed in the subtransaction (or one of its children)
  // are pending again; reset the hints of every queue where the transaction locked pending jobs.
  if (event == SUBXACT_EVENT_ABORT_SUB) ResetHintsOfLockedQueues();
}

void OnTransactionEnd(XactEvent event, void*) {
  switch (event) {
    case XACT_EVENT_COMMIT:
      AddCounted();
      EndFlushes(true);
      if (lowering_count > 0 || reset_hints) LowerNotedHints();
      if (noted_count > 0 || noted_database) WakeNotedWaiters();
      break;
    case XACT_EVENT_ABORT:
      // Rows this transaction claimed or removed are pending again.
      ResetHintsOfLockedQueues();
      EndFlushes(false);
      // A claim that raised while waiting (cancel, timeout) leaves its slot.
      Unpublish();
      break;
    case XACT_EVENT_PREPARE:
      // The commit happens later in another backend, which knows nothing of
      // these queues: waiters notice those jobs at their next periodic look,
      // and claim hints at the maintenance worker's next reset (its
      // kHintRefresh). If it is rolled back, the jobs it locked are pending
      // again behind hints that moved past them; that too is caught by the
      // refresh.
      ResetHintsOfLockedQueues();
      // Its counts are taken as committed now (its rows in pgq.finished
      // too): statistics, off only if it is rolled back later.
      AddCounted();
      EndFlushes(true);
      break;
    default:
      break;
  }
  if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT || event == XACT_EVENT_PREPARE) {
    ForgetNotes();
  }
}

void UnpublishAtExit(int, Datum) { Unpublish(); }

// Publishes this backend's slot for `queue_id`; false without shared memory.
bool Publish(int32 queue_id) {
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
  pg_atomic_write_u64(slot, WaiterKey(MyDatabaseId, queue_id));
  slot_published = true;
  return true;
}

}  // namespace

void PublishWaiter(int32 queue_id) {
  (void)Publish(queue_id);
  ResetLatch(MyLatch);
  // INVARIANT: the slot is visible before the caller's next snapshot.
  pg_memory_barrier();
}

void RegisterWakeups() {
  RegisterXactCallback(OnTransactionEnd, nullptr);
  RegisterSubXactCallback(OnSubTransactionEnd, nullptr);
}

void NoteJobsReady(int32 queue_id) {
  if (Shared() == nullptr || noted_database) return;
  for (int q = 0; q < noted_count; ++q) {
    if (noted_queues[q] == queue_id) return;
  }
  if (noted_count == kMaxNotedQueues) {
    noted_database = true;
    return;
  }
  noted_queues[noted_count++] = queue_id;
}

void NoteJobsReadyInDatabase() {
  if (Shared() == nullptr) return;
  noted_database = true;
  reset_hints = true;
}

void NoteJobsPending(int32 queue_id, const core::ClaimKey& key, bool wake) {
  if (Shared() == nullptr) return;
  if (wake) NoteJobsReady(queue_id);
  if (reset_hints) return;
  QueueSlot* slot = FindQueueSlot(queue_id);
  if (slot == nullptr) return;  // no hint kept for this queue
  Lowering* entry = nullptr;
  for (int i = 0; i < lowering_count && entry == nullptr; ++i) {
    if (lowerings[i].slot == slot) entry = &lowerings[i];
  }
  if (entry == nullptr) {
    if (lowering_count == kMaxNotedQueues) {
      reset_hints = true;
      return;
    }
    entry = &lowerings[lowering_count++];
    *entry = Lowering{slot, false, core::kFirstKey, core::ClaimAlarm{}};
  }
  // Due or not is decided now, with this statement's clock: a job noted as
  // not due that is due by commit time only makes the alarm ring at once.
  if (key.run_at > Now()) {
    entry->later = core::MergeAlarms(entry->later, core::ClaimAlarm{true, key.run_at, key});
  } else {
    entry->due = entry->has_due ? core::EarlierKey(entry->due, key) : key;
    entry->has_due = true;
  }
}

bool NoteFinished(int32 queue_id, uint64 jobs) {
  Counted* entry = CountedEntry(queue_id);
  if (entry == nullptr) {
    NoteCount(queue_id, kCompletions, jobs);
    return false;
  }
  entry->finished += jobs;
  entry->counts.values[kCompletions] += jobs;
  return true;
}

void NoteCount(int32 queue_id, Counter counter, uint64 n) {
  if (n == 0) return;
  if (Counted* entry = CountedEntry(queue_id)) {
    entry->counts.values[counter] += n;
  } else if (QueueSlot* slot = Shared() == nullptr ? nullptr : FindQueueSlot(queue_id)) {
    // More queues than noted in one transaction: counted now, committed or
    // not (a statistic).
    QueueCounts now{};
    now.values[counter] = n;
    AddCounts(slot, now);
  }
}

int MarkFinishedToFlush(FlushSlot* out) {
  const int n = MarkFlushes(out, kMaxFlushes, kMaxFlushes - flush_count);
  for (int i = 0; i < n; ++i) {
    if (out[i].newly_marked) flushes[flush_count++] = Flush{out[i].slot, 0};
    // What this transaction already wrote is not to be written again.
    for (int f = 0; f < flush_count; ++f) {
      if (flushes[f].slot != out[i].slot) continue;
      out[i].finished -= std::min(out[i].finished, flushes[f].written);
      flushes[f].written += out[i].finished;
    }
  }
  return n;
}

void NoteResetOnAbort(int32 queue_id) {
  if (Shared() == nullptr) return;
  QueueSlot* slot = FindQueueSlot(queue_id);
  if (slot == nullptr) return;
  for (int i = 0; i < reset_on_abort_count; ++i) {
    if (reset_on_abort[i] == slot) return;
  }
  if (reset_on_abort_count == kMaxNotedQueues) {
    reset_on_abort_overflow = true;
    return;
  }
  reset_on_abort[reset_on_abort_count++] = slot;
}

ClaimWaiter::ClaimWaiter(int32 queue_id) : shared_(Publish(queue_id)) {}

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
