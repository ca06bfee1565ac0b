// pgq-relay --stream: forwards a stream's events to RabbitMQ or NATS
// JetStream as a registered consumer of the stream (issue 21, SPEC §10).
//
// A batch goes: pgq.next_batch -> every event published -> every confirm
// -> pgq.finish_batch. The batch is the lease: until it is finished the
// stream gives it again, so a relay that dies (or loses the broker or the
// database) with a batch in flight publishes it again when it comes back,
// with the same message ids (pgqs-STREAM-EVENTID): at-least-once, duplicates
// only of that batch. A message the broker returns (no queue took it) or
// that cannot be a message (no routing key) stops the relay with exit 1,
// the batch unfinished: a stream has no dead-letter, so nothing is skipped
// until the topology is fixed.
//
// One relay per (stream, consumer) publishes at a time: each holds a session
// advisory lock on the pair; a second one waits for it, a standby that takes
// over when the first one's session ends.
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

  bool TakeLock();
  bool KeepLock();
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
  Clock::time_point next_stats_{};
  std::uint64_t published_ = 0, republished_ = 0, confirmed_ = 0, batches_ = 0, events_ = 0;
};

}  // namespace pgq::cli
