// pgq-relay --stream: forwards a stream's events to RabbitMQ or NATS
// JetStream as a registered consumer of the stream (issue 21, SPEC §10).
//
// A batch goes: pgq.next_batch_traced -> every event published -> every confirm
// -> pgq.finish_batch. The batch is the lease: until it is finished the
// stream gives it again, so a relay that dies (or loses the broker or the
// database) with a batch in flight publishes it again when it comes back,
// with the same message ids (pgqs-STREAM-EVENTID): at-least-once, duplicates
// only of that batch. A message the broker returns (no queue took it) or
// that cannot be a message (no routing key) stops the relay with exit 1,
// the batch unfinished: a stream has no dead-letter, so nothing is skipped
// until the topology is fixed.
//
// One relay per (stream, consumer) publishes at a time: each holds the
// consumer's single-active guard, pgq.acquire_consumer (2.0.1: a session
// lock that needs the consume right, so no other role can take it first); a
// second one waits for it, a standby that takes over when the first one's
// session ends, and takes it again after any reconnect. Against a catalog
// still on 2.0 it falls back to 2.0's advisory lock, with a warning.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "broker.h"
#include "pq.h"
#include "process.h"
#include "relay_message.h"
#include "relay_options.h"

namespace pgq::cli {

class StreamRelay {
 public:
  StreamRelay(RelayOptions options, std::chrono::milliseconds shutdown_timeout,
              std::chrono::milliseconds stats_interval, std::unique_ptr<Broker> broker,
              Connection db, SignalPipe& signals);

  // Until a stop signal, --max-jobs events, or an error; the exit status.
  int Run();

 private:
  using Clock = std::chrono::steady_clock;

  struct Pending {
    ClaimedEvent event;
    Message message;
    bool acked = false;
    bool to_send = true;
    std::uint64_t token = 0;
    int resends = 0;                  // the broker's "not now" for this message
    Clock::time_point publish_after;  // after a "not now": with backoff
  };

  bool HasGuard();
  bool TakeLock();
  bool KeepLock();
  void ReleaseLock();
  bool ConnectBroker();
  bool Deliver(std::vector<Pending>& batch);
  bool Finish(const std::string& batch_id, std::size_t events);
  void DrainSignals();
  bool SleepUnlessStopped(std::chrono::milliseconds pause);
  void MaybeLogStats(bool force);
  void Log(const std::string& line) const;

  RelayOptions options_;
  std::chrono::milliseconds shutdown_timeout_;
  std::chrono::milliseconds stats_interval_;
  std::unique_ptr<Broker> broker_;
  Connection db_;
  SignalPipe& signals_;
  bool stopping_ = false;
  Clock::time_point stop_deadline_{};
  std::chrono::milliseconds broker_backoff_{100};
  Clock::time_point next_broker_try_{};
  std::string last_broker_error_;
  std::string last_resend_reason_;
  std::uint64_t lock_session_ = 0;  // db_.reconnects() when the lock was taken
  std::uint64_t guard_probed_ = 0;  // db_.reconnects() + 1 when HasGuard() asked
  bool has_guard_ = false;
  Clock::time_point next_stats_{};
  std::uint64_t published_ = 0, republished_ = 0, confirmed_ = 0, batches_ = 0, events_ = 0;
};

}  // namespace pgq::cli
