// Waiting on a channel until a commit wakes it: the one way a backend of
// ours sleeps for work (claim's wait, next_batch's wait, the handler
// workers between jobs). No polling, no NOTIFY.
//
// A channel is what a waiter waits for: jobs of a queue made ready (or of
// one of several queues, or of any queue of the database), or events
// appended to a stream. A waiter publishes its channel in its own slot of
// shared memory and sleeps on its latch. A transaction that readies jobs
// or appends events notes the queues and streams in its ledger
// (pg/ledger.h); when it commits, the ledger calls WakeChannels, which sets
// the latch of every backend of the database whose channel they wake.
//
// Used the same way by every waiter: before each attempt (before its
// snapshot) Arm(channel), then the attempt, then Sleep if it found nothing.
//
// INVARIANT (no lost wake-up): Arm publishes the slot and resets the latch
// before the attempt takes its snapshot, and a committer reads the slots
// only after its commit is visible to new snapshots. With a full barrier on
// both sides, either the attempt sees the commit or the committer sees the
// waiter and sets its latch.
//
// A channel is 32 bits in the slot beside the database, so ids are kept
// modulo 2^30 and a set of queues as a 30-bit mask: a waiter may now and
// then be woken for another queue or stream, never missed; it looks and
// sleeps again.
//
// Without shared memory (not preloaded) Arm publishes nothing and Sleep
// sleeps a short poll interval instead.
#pragma once

#include "pg/pg.h"

namespace pgq::pg {

enum class ChannelKind : uint32 { kQueue = 0, kStream = 1, kQueueSet = 2, kAnyQueue = 3 };

class Channel {
 public:
  static Channel Queue(int32 queue_id) { return Channel(ChannelKind::kQueue, Low(queue_id)); }
  // Any of `queue_ids` (one: that queue).
  static Channel Queues(const int32* queue_ids, int count);
  // Any queue of the database (handler workers).
  static Channel AnyQueue() { return Channel(ChannelKind::kAnyQueue, 0); }
  static Channel Stream(int32 stream_id) { return Channel(ChannelKind::kStream, Low(stream_id)); }

  uint32 key() const { return key_; }
  bool operator==(const Channel& other) const { return key_ == other.key_; }
  bool operator!=(const Channel& other) const { return key_ != other.key_; }

  // Whether a commit that readied jobs of queue `id` (kQueue) or appended
  // to stream `id` (kStream) wakes a waiter on `key`.
  static bool Wakes(uint32 key, ChannelKind kind, int32 id);

 private:
  static constexpr uint32 kIdMask = (1u << 30) - 1;
  static constexpr int kSetBits = 30;
  static uint32 Low(int32 id) { return static_cast<uint32>(id) & kIdMask; }
  static uint32 SetBit(int32 id) { return 1u << (static_cast<uint32>(id) % kSetBits); }
  Channel(ChannelKind kind, uint32 low) : key_((static_cast<uint32>(kind) << 30) | low) {}
  uint32 key_;
};

// A waiter for the scope of this object (a claim or a next_batch that
// waits): its slot is taken back when it ends.
class ChannelWaiter {
 public:
  ChannelWaiter() = default;
  ~ChannelWaiter();
  ChannelWaiter(const ChannelWaiter&) = delete;
  ChannelWaiter& operator=(const ChannelWaiter&) = delete;

  // Before each attempt: publishes `channel` (replacing what this backend
  // waited on) and resets the latch, so that a commit that wakes it from
  // now on is not lost.
  void Arm(Channel channel);
  // Sleeps until woken, `max_millis` passed, or an interrupt; raises on
  // cancel (query_canceled) and termination; ends the session when its
  // client has gone.
  void Sleep(long max_millis);

 private:
  bool armed_ = false;
};

// The same Arm for a background worker that waits across its loop (handler
// workers, which sleep on their latch themselves): the slot stays
// published until the next Arm, the end of a failed transaction, or exit.
void ArmWaiter(Channel channel);

// For the ledger's commit callback: sets the latch of every backend of this
// database waiting on a channel that jobs readied in `ids` (kQueue) or
// events appended to `ids` (kStream) wake, or with `whole_database` on any
// channel of it. Never raises.
void WakeChannels(ChannelKind kind, const int32* ids, int count, bool whole_database);

// Takes this backend's slot back, if published (the ledger's abort
// callback: a wait that raised). Never raises.
void ForgetWaiter();

}  // namespace pgq::pg
