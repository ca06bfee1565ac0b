// The transaction ledger: what the current transaction did to each queue,
// acted on when it ends, by one callback for commit, abort and prepare.
//
// One entry per queue touched, holding every commit-time effect:
//
//   pending   jobs made pending: at commit, after they are visible, the
//             queue's claim hint is lowered to the first of them
//             (core/claim_hint.h) and, if any were due, its waiting claims
//             are woken (pg/channel_wait.h)
//   locked    pending jobs this transaction locked (claimed, removed): claims
//             of other sessions skip them and the hint moves past them, so
//             if the transaction or a subtransaction rolls back, or it is
//             prepared, the hint is reset
//   left      running jobs stopped running: a capped queue's waiting claims
//             are woken at commit (there is room again)
//   counts    pgq.metrics() counters and completions for done_recent, added
//             to the queue's shared slot at commit (pg/queue_slots.h)
//   flushing  completions this transaction writes to pgq.finished: they
//             leave shared memory when it commits, and stay when it aborts
//   unfinished jobs made (+) and finished (-), and room reserved for new
//             ones under max_pending (core/pending_count.h): per
//             subtransaction, so that one rolled back takes its notes and
//             reservations with it; at commit the queue's count learns the
//             rest, at abort the reservations are given back
//
// The jobs store (store/jobs.h) writes every note; nothing else needs to.
// A transaction that touches more queues than the ledger holds falls back
// to the whole database: every hint of it reset, every waiter of it woken.
//
// Without shared memory (not preloaded) there are no hints, waiters or
// counts: every note is a no-op and completions go to pgq.finished.
#pragma once

#include <optional>

#include "core/claim_hint.h"
#include "core/pending_count.h"
#include "pg/pg.h"
#include "pg/queue_slots.h"

namespace pgq::pg::ledger {

// Registers the transaction callbacks; called from _PG_init when preloaded.
void Register();

// Jobs of `queue_id` become pending if the transaction commits, the first
// of them in claim order at `first`. `wake`: some are due now (waiting claims
// look again); otherwise only the hint's alarm learns of them.
void NotePending(int32 queue_id, const core::ClaimKey& first, bool wake);

// The first job of `queue_id` this transaction made pending and due (so
// far), which the queue's shared claim hint learns of only at commit: its
// own claims look from there too. kFirstKey when the ledger overflowed (any
// job may be one).
std::optional<core::ClaimKey> OwnDue(int32 queue_id);
// A claim scanned from OwnDue and found no job this transaction made
// pending before `to` (the first job it took: an earlier one would have
// been taken first; or the bound it stopped at), or, `to` nullptr, none at
// all: its later claims start there.
void OwnScannedTo(int32 queue_id, const core::ClaimKey* to);

// Waiting claims of `queue_id` look again at commit (a resume), no hint
// change.
void NoteReady(int32 queue_id);

// Running jobs of `queue_id` stopped running (completed, failed, released,
// snoozed, cancelled, expired): if the queue has a max_running, its waiting
// claims look again at commit.
void NoteLeftRunning(int32 queue_id);

// Jobs of some queues of this database became pending by a statement that
// did not say which first (maintenance returning expired leases): at commit
// every hint of the database is reset and every waiter woken.
void NoteReadyInDatabase();

// Events were appended to stream `stream_id`: its waiting readers
// (next_batch with a wait) look again at commit.
void NoteAppended(int32 stream_id);

// This transaction locked pending jobs of `queue_id`.
void NoteLocked(int32 queue_id);

// `n` of `counter` in `queue_id`, counted at commit (a statistic: with no
// room in the ledger it is counted at once, committed or not).
void NoteCount(int32 queue_id, Counter counter, uint64 n);

// `jobs` completions of `queue_id`, counted in shared memory at commit for
// done_recent and the completions counter. False without shared memory, a
// slot or room: the caller records them in pgq.finished itself.
bool NoteFinished(int32 queue_id, uint64 jobs);

// Jobs of `queue_id` made (delta > 0: new jobs, revived ones) or finished
// (delta < 0: completed, dead-lettered) by this (sub)transaction, for the
// queue's count of unfinished jobs at commit. Every path that makes or
// ends a job notes it (store/jobs.h); moves between a ring and a row do not.
void NoteUnfinished(int32 queue_id, int64 delta);

// Reserves room for `jobs` new jobs of `slot`'s queue under `limit` (its
// max_pending) until this (sub)transaction ends. Raises 54000 when the
// transaction reserved in too many queues to note. `*unfinished`: the
// queue's count with every reservation, for the refusal's message.
core::Room ReserveRoom(int32 queue_id, QueueSlot* slot, int64 jobs, int64 limit, int64* unfinished);

// The queue's max_pending changed: its waiters for room look again at
// commit.
void NoteRoomChanged(int32 queue_id);

// At most this many queues flushed per transaction; the rest wait for the
// next pass.
inline constexpr int kMaxFlushes = 64;

// The flush of completions counted in shared memory into pgq.finished, by
// the current transaction: calls write(queue_id, jobs) for each queue of
// this database that has some and that no other transaction is flushing.
// They stay in shared memory until this transaction commits (then what it
// wrote is subtracted) or aborts (then they stay for the next flush), so a
// reader finds every completion in one place or the other, and two flushers
// never write the same ones.
template <typename Write>
void FlushFinishedCounts(Write write);

// Marks the queues to flush and returns them with what is left to write of
// each (for FlushFinishedCounts).
int MarkFinishedToFlush(FlushSlot* out);

template <typename Write>
void FlushFinishedCounts(Write write) {
  FlushSlot marked[kMaxFlushes];
  const int n = MarkFinishedToFlush(marked);
  for (int i = 0; i < n; ++i) {
    if (marked[i].finished > 0) write(marked[i].queue_id, marked[i].finished);
  }
}

}  // namespace pgq::pg::ledger
