#include "pg/ledger.h"

#include <algorithm>

#include "pg/boundary.h"
#include "pg/settings.h"
#include "pg/shared.h"
#include "pg/channel_wait.h"

extern "C" {
#include "access/xact.h"
}

namespace pgq::pg::ledger {

namespace {

// Queues one transaction keeps apart; past them it acts on the whole
// database (a spurious reset or wake-up costs one scan from the start).
constexpr int kMaxEntries = kMaxFlushes;

struct Entry {
  int32 queue_id;
  QueueSlot* slot;  // nullptr: the queue has no shared slot (no hint, counts, flush)
  // pending
  bool wake;
  bool has_due;
  core::ClaimKey due;  // the earliest due job made pending
  // Where this transaction's own claims look for those jobs (OwnDue): `due`
  // until a claim scanned past it (OwnScannedTo); `due` itself is kept for
  // the commit, a claim in a subtransaction that rolls back included.
  bool has_own_scan;
  core::ClaimKey own_scan;
  core::ClaimAlarm later;  // the jobs made pending that were not due yet
  // locked
  bool locked;
  // left running
  bool left_running;
  // max_pending changed (waiters for room look again)
  bool room_changed;
  // counts
  uint64 finished;
  QueueCounts counts;
  // flushing
  bool flushing;
  uint64 flushed;
};

Entry entries[kMaxEntries];
int entry_count = 0;
// More queues made pending than entries, or NoteReadyInDatabase: at commit
// every hint of the database is reset and every waiter woken.
bool whole_database = false;
// More queues locked than entries: an abort resets every hint of the database.
bool locked_overflow = false;

// Streams appended to (their readers are woken at commit); past the array,
// every waiter of the database is.
constexpr int kMaxStreams = 16;
int32 appended_streams[kMaxStreams];
int appended_count = 0;

// Unfinished jobs made or ended, and room reserved, per (subtransaction,
// queue): a subtransaction's notes go with its rollback, or to its parent
// at its commit.
struct UnfinishedNote {
  SubTransactionId sub;
  int32 queue_id;
  QueueSlot* slot;
  int64 delta;
  int64 reserved;
  int generation;  // entered at its pre-commit (EnterCommit); -1: not
};
constexpr int kMaxUnfinishedNotes = 256;
UnfinishedNote unfinished_notes[kMaxUnfinishedNotes];
int unfinished_count = 0;
// A delta did not fit: every count of the database is forgotten at commit
// (counted again before the next reservation).
bool unfinished_lost = false;

UnfinishedNote* FindUnfinished(SubTransactionId sub, int32 queue_id) {
  for (int i = 0; i < unfinished_count; ++i) {
    UnfinishedNote& note = unfinished_notes[i];
    if (note.sub == sub && note.queue_id == queue_id) return &note;
  }
  return nullptr;
}

UnfinishedNote* TouchUnfinished(int32 queue_id, QueueSlot* slot) {
  const SubTransactionId sub = GetCurrentSubTransactionId();
  if (UnfinishedNote* note = FindUnfinished(sub, queue_id)) return note;
  if (unfinished_count == kMaxUnfinishedNotes) return nullptr;
  UnfinishedNote* note = &unfinished_notes[unfinished_count++];
  *note = UnfinishedNote{sub, queue_id, slot, 0, 0, -1};
  return note;
}

// A subtransaction rolled back: its reservations are given back now, its
// deltas never happened.
void DropUnfinished(SubTransactionId sub) {
  int kept = 0;
  for (int i = 0; i < unfinished_count; ++i) {
    const UnfinishedNote& note = unfinished_notes[i];
    if (note.sub == sub) {
      if (note.reserved > 0) GiveBackPending(note.slot, note.reserved);
      continue;
    }
    unfinished_notes[kept++] = note;
  }
  unfinished_count = kept;
}

// A subtransaction committed: its notes are its parent's.
void LiftUnfinished(SubTransactionId sub, SubTransactionId parent) {
  int kept = 0;
  for (int i = 0; i < unfinished_count; ++i) {
    UnfinishedNote note = unfinished_notes[i];
    if (note.sub == sub) {
      if (UnfinishedNote* into = FindUnfinished(parent, note.queue_id)) {
        into->delta += note.delta;
        into->reserved += note.reserved;
        continue;
      }
      note.sub = parent;
    }
    unfinished_notes[kept++] = note;
  }
  unfinished_count = kept;
}

// Pre-commit (or pre-prepare): nothing changes after it; each queue whose
// count this transaction changes knows it is committing until its
// callback has run (pg/queue_slots.h EnterCommit).
void EnterCommits() {
  for (int i = 0; i < unfinished_count; ++i) {
    UnfinishedNote& note = unfinished_notes[i];
    if (note.delta != 0 && note.generation < 0) note.generation = EnterCommit(note.slot);
  }
}

// Commit (or prepare): each queue's count learns its delta; reservations
// end. After the commit is visible: a count in progress asks its snapshot
// whether it saw this commit (pg/queue_slots.h CommitPending).
void CommitUnfinished() {
  if (unfinished_lost) ForgetPendingCounts();
  const TransactionId xid = GetTopTransactionIdIfAny();
  for (int i = 0; i < unfinished_count; ++i) {
    const UnfinishedNote& note = unfinished_notes[i];
    if (note.delta != 0 || note.reserved != 0) {
      CommitPending(note.slot, unfinished_lost ? 0 : note.delta, note.reserved, xid);
    }
    LeaveCommit(note.slot, note.generation);
  }
}

void AbortUnfinished() {
  for (int i = 0; i < unfinished_count; ++i) {
    const UnfinishedNote& note = unfinished_notes[i];
    if (note.reserved > 0) GiveBackPending(note.slot, note.reserved);
    LeaveCommit(note.slot, note.generation);
  }
}

Entry* Find(int32 queue_id) {
  for (int i = 0; i < entry_count; ++i) {
    if (entries[i].queue_id == queue_id) return &entries[i];
  }
  return nullptr;
}

// The entry of `queue_id`, added if new; nullptr when the ledger is full.
Entry* Touch(int32 queue_id) {
  if (Entry* entry = Find(queue_id)) return entry;
  if (entry_count == kMaxEntries) return nullptr;
  Entry* entry = &entries[entry_count++];
  *entry = Entry{};
  entry->queue_id = queue_id;
  entry->slot = FindQueueSlot(queue_id);
  entry->due = core::kFirstKey;
  return entry;
}

void ResetLockedHints() {
  if (locked_overflow) {
    ResetDatabaseSlots(false);
    return;
  }
  for (int i = 0; i < entry_count; ++i) {
    if (entries[i].locked && entries[i].slot != nullptr) ResetQueueHint(entries[i].slot);
  }
}

void AddCounts() {
  for (int i = 0; i < entry_count; ++i) {
    const Entry& e = entries[i];
    if (e.slot == nullptr) continue;
    if (e.finished > 0) AddFinished(e.slot, e.finished);
    pg::AddCounts(e.slot, e.counts);
  }
}

void EndFlushes(bool committed) {
  for (int i = 0; i < entry_count; ++i) {
    if (entries[i].flushing) EndFlush(entries[i].slot, entries[i].flushed, committed);
  }
}

// After the commit is visible (the invariant of core/claim_hint.h), before
// waking anyone.
void LowerHints() {
  if (whole_database) {
    ResetDatabaseSlots(false);
    return;
  }
  for (int i = 0; i < entry_count; ++i) {
    const Entry& e = entries[i];
    if (e.slot == nullptr || (!e.has_due && !e.later.set)) continue;
    UpdateClaimHint(e.slot, e.has_due ? &e.due : nullptr, e.later);
  }
}

void Wake() {
  int32 queues[kMaxEntries];
  int n = 0;
  for (int i = 0; i < entry_count; ++i) {
    const Entry& e = entries[i];
    const bool room = e.left_running && e.slot != nullptr && QueueCapped(e.slot);
    if (e.wake || room) queues[n++] = e.queue_id;
  }
  if (n > 0 || whole_database) WakeChannels(ChannelKind::kQueue, queues, n, whole_database);
  if (appended_count > 0) {
    WakeChannels(ChannelKind::kStream, appended_streams, appended_count, whole_database);
  }
  for (int i = 0; i < entry_count; ++i) {
    if (entries[i].room_changed && entries[i].slot != nullptr) WakeRoomWaiters(entries[i].slot);
  }
}

void Forget() {
  entry_count = 0;
  unfinished_count = 0;
  unfinished_lost = false;
  appended_count = 0;
  whole_database = false;
  locked_overflow = false;
}

void OnSubTransactionEnd(SubXactEvent event, SubTransactionId sub, SubTransactionId parent, void*) {
  if (event == SUBXACT_EVENT_ABORT_SUB) {
    // Rows the subtransaction (or one of its children) claimed or removed
    // are pending again: reset the hint of every queue where this
    // transaction locked pending jobs.
    ResetLockedHints();
    DropUnfinished(sub);
  } else if (event == SUBXACT_EVENT_COMMIT_SUB) {
    LiftUnfinished(sub, parent);
  }
}

// Runs where nothing may raise an error.
void OnTransactionEnd(XactEvent event, void*) {
  switch (event) {
    case XACT_EVENT_PRE_COMMIT:
    case XACT_EVENT_PRE_PREPARE:
      EnterCommits();
      return;
    case XACT_EVENT_COMMIT:
      CommitUnfinished();
      AddCounts();
      EndFlushes(true);
      LowerHints();
      Wake();
      break;
    case XACT_EVENT_ABORT:
      AbortUnfinished();
      ResetLockedHints();
      EndFlushes(false);
      // A claim that raised while waiting (cancel, timeout) leaves its slot.
      ForgetWaiter();
      break;
    case XACT_EVENT_PREPARE:
      // The commit happens later in another backend, which knows nothing of
      // these queues: waiters notice its jobs at their next periodic look,
      // and claim hints at the maintenance worker's next reset. If it is
      // rolled back, the jobs it locked are pending again behind hints that
      // moved past them: reset now.
      ResetLockedHints();
      // Its counts are taken as committed now (its pgq.finished rows too):
      // statistics, off only if it is rolled back later. So are its
      // unfinished jobs (a count's snapshot sees it running until COMMIT
      // PREPARED, so a count in progress adds them): a ROLLBACK PREPARED
      // leaves the count off until the maintenance's check corrects it.
      CommitUnfinished();
      AddCounts();
      EndFlushes(true);
      break;
    default:
      return;
  }
  Forget();
}

}  // namespace

void Register() {
  RegisterXactCallback(OnTransactionEnd, nullptr);
  RegisterSubXactCallback(OnSubTransactionEnd, nullptr);
}

void NotePending(int32 queue_id, const core::ClaimKey& first, bool wake) {
  if (Shared() == nullptr) return;
  Entry* entry = Touch(queue_id);
  if (entry == nullptr) {
    whole_database = true;
    return;
  }
  entry->wake = entry->wake || wake;
  // Due or not is decided now, with this statement's clock: a job noted as
  // not due that is due by commit time only makes the alarm ring at once.
  if (first.run_at > Now()) {
    entry->later = core::MergeAlarms(entry->later, core::ClaimAlarm{true, first.run_at, first});
  } else {
    entry->due = entry->has_due ? core::EarlierKey(entry->due, first) : first;
    entry->has_due = true;
    entry->own_scan = entry->has_own_scan ? core::EarlierKey(entry->own_scan, first) : first;
    entry->has_own_scan = true;
  }
}

std::optional<core::ClaimKey> OwnDue(int32 queue_id) {
  if (const Entry* entry = Find(queue_id)) {
    if (entry->has_own_scan) return entry->own_scan;
  }
  if (whole_database) return core::kFirstKey;
  return std::nullopt;
}

void OwnScannedTo(int32 queue_id, const core::ClaimKey* to) {
  Entry* entry = Find(queue_id);
  if (entry == nullptr || !entry->has_own_scan) return;
  if (to == nullptr) {
    entry->has_own_scan = false;
  } else if (core::ClaimsBefore(entry->own_scan, *to)) {
    entry->own_scan = *to;
  }
}

void NoteReady(int32 queue_id) {
  if (Shared() == nullptr) return;
  if (Entry* entry = Touch(queue_id)) {
    entry->wake = true;
  } else {
    whole_database = true;
  }
}

void NoteLeftRunning(int32 queue_id) {
  if (Shared() == nullptr) return;
  if (Entry* entry = Touch(queue_id)) {
    entry->left_running = true;
  } else {
    whole_database = true;
  }
}

void NoteRoomChanged(int32 queue_id) {
  if (Shared() == nullptr) return;
  if (Entry* entry = Touch(queue_id)) entry->room_changed = true;
}

void NoteReadyInDatabase() {
  if (Shared() != nullptr) whole_database = true;
}

void NoteAppended(int32 stream_id) {
  if (Shared() == nullptr) return;
  for (int i = 0; i < appended_count; ++i) {
    if (appended_streams[i] == stream_id) return;
  }
  if (appended_count == kMaxStreams) {
    whole_database = true;
    return;
  }
  appended_streams[appended_count++] = stream_id;
}

void NoteLocked(int32 queue_id) {
  if (Shared() == nullptr) return;
  if (Entry* entry = Touch(queue_id)) {
    entry->locked = true;
  } else {
    locked_overflow = true;
  }
}

void NoteCount(int32 queue_id, Counter counter, uint64 n) {
  if (n == 0 || Shared() == nullptr) return;
  if (Entry* entry = Touch(queue_id)) {
    entry->counts.values[counter] += n;
  } else if (QueueSlot* slot = FindQueueSlot(queue_id)) {
    QueueCounts now{};
    now.values[counter] = n;
    pg::AddCounts(slot, now);
  }
}

bool NoteFinished(int32 queue_id, uint64 jobs) {
  Entry* entry = Shared() == nullptr ? nullptr : Touch(queue_id);
  if (entry == nullptr || entry->slot == nullptr) {
    NoteCount(queue_id, kCompletions, jobs);
    return false;
  }
  entry->finished += jobs;
  entry->counts.values[kCompletions] += jobs;
  return true;
}

void NoteUnfinished(int32 queue_id, int64 delta) {
  if (delta == 0 || Shared() == nullptr) return;
  QueueSlot* slot = FindQueueSlot(queue_id);
  if (slot == nullptr) return;
  if (UnfinishedNote* note = TouchUnfinished(queue_id, slot)) {
    note->delta += delta;
  } else {
    unfinished_lost = true;
  }
}

core::Room ReserveRoom(int32 queue_id, QueueSlot* slot, int64 jobs, int64 limit,
                       int64* unfinished) {
  // Noted before it is taken: an abort must find it to give it back.
  UnfinishedNote* note = TouchUnfinished(queue_id, slot);
  if (note == nullptr) {
    Raise(ERRCODE_PROGRAM_LIMIT_EXCEEDED,
          "a transaction can enqueue into at most " + std::to_string(kMaxUnfinishedNotes) +
              " queues with max_pending",
          {}, "Enqueue into fewer queues, or in fewer savepoints, per transaction.");
  }
  const core::Room room = ReservePending(slot, jobs, limit, unfinished);
  if (room == core::Room::kReserved) note->reserved += jobs;
  return room;
}

int MarkFinishedToFlush(FlushSlot* out) {
  if (Shared() == nullptr) return 0;
  int flushing = 0;
  for (int i = 0; i < entry_count; ++i) flushing += entries[i].flushing ? 1 : 0;
  // New marks need entries: no more than the ledger has left.
  const int room = std::min(kMaxFlushes - flushing, kMaxEntries - entry_count);
  const int n = MarkFlushes(out, kMaxFlushes, room);
  for (int i = 0; i < n; ++i) {
    Entry* entry = Touch(out[i].queue_id);
    if (entry == nullptr) {
      // Cannot happen (room above); not writing it is always safe.
      out[i].finished = 0;
      continue;
    }
    entry->slot = out[i].slot;
    entry->flushing = true;
    // What this transaction already wrote is not to be written again.
    out[i].finished -= std::min(out[i].finished, entry->flushed);
    entry->flushed += out[i].finished;
    SetFlushAmount(entry->slot, entry->flushed);
  }
  return n;
}

}  // namespace pgq::pg::ledger
