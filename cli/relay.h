// pgq-relay's event loop: one thread, one poll() over the signal pipe, the
// claiming connection, the broker and the metrics endpoint.
//
// A job goes: claimed -> published -> confirmed by the broker -> completed
// (pgq.complete_many, one statement for all that were confirmed together).
// The three steps overlap, so the broker's confirm does not stand between
// two claims: --concurrency N messages wait for their confirms at most, the
// next ones are claimed meanwhile (at most 3N jobs held in all), and the
// confirmed ones are completed on a connection of their own while the loop
// goes on.
// A message the broker refused (returned: no queue took it) fails its job
// (pgq.fail: retried with the queue's backoff); a nack is "not now" and the
// message is published again on a new connection (amqp_broker.cpp). A broker connection lost with
// messages unconfirmed publishes them again on the next one (same message ids). Every job held is
// heartbeated at half its lease, so a slow confirm never lets another relay take it; a completion
// that cannot reach the server is tried again until the job's lease ends (then the job is published
// again by whoever claims it: the at-least-once window, see docs/adr/0019).
//
// Three database connections: `claims` carries one pgq.claim_traced(..., wait) at
// a time (as pgq-worker's), `completions` one pgq.complete_many at a time,
// `control` the short fenced calls (extend, fail, release).
#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "broker.h"
#include "metrics_endpoint.h"
#include "pq.h"
#include "process.h"
#include "relay_message.h"
#include "relay_options.h"

namespace pgq::cli {

// The options with their intervals checked by the server.
struct RelaySettings {
  RelayOptions options;
  double lease_seconds = 0;  // --lease; 0: the queue's, learnt from each claim
  std::chrono::milliseconds shutdown_timeout{};
  std::chrono::milliseconds stats_interval{};  // 0: no stats line
};

class Relay {
 public:
  Relay(RelaySettings settings, std::unique_ptr<Broker> broker, Connection claims,
        Connection completions, Connection control, SignalPipe& signals,
        std::optional<MetricsEndpoint> metrics);

  // Until a stop signal, --max-jobs, or an error; the exit status.
  int Run();

 private:
  using Clock = std::chrono::steady_clock;

  struct Flight {
    enum class State {
      kToPublish,   // claimed (or to send again): publish when the broker is there
      kPublished,   // waiting for the broker's confirm
      kConfirmed,   // the broker has it: complete the job
      kCompleting,  // in the pgq.complete_many under way
      kRejected,    // the broker refused it, or it cannot be a message: fail the job
    };
    ClaimedEvent event;
    std::optional<Message> message;  // none: `reason` says why
    State state = State::kToPublish;
    std::string reason;  // kRejected: pgq.fail's text
    std::uint64_t token = 0;
    int sends = 0;  // publishes of this attempt (more than one: after a lost connection)
    Clock::time_point publish_after;  // kToPublish: after a broker's "not now"
    std::chrono::milliseconds resend_backoff{};
    double enqueued_epoch = 0;  // for the commit-to-confirm latency
    std::string lease;          // what pgq.extend renews the lease with
    Clock::duration half_lease{};
    Clock::duration lease_length{};
    Clock::time_point next_extend;
    Clock::time_point lease_end;  // on this clock, moved by every extend that worked
  };
  using FlightList = std::list<Flight>;

  struct Counters {
    std::uint64_t claimed = 0, published = 0, republished = 0, confirmed = 0, completed = 0,
                  failed = 0, released = 0, leases_lost = 0, broker_connects = 0,
                  duplicates_dropped = 0;
  };

  bool CanClaimMore() const;
  std::size_t CountIn(Flight::State state) const;
  long ClaimRoom() const;
  bool Finished() const;
  void ConnectBroker();
  void BrokerLost(const std::string& why);
  void PublishDue();
  void PollBroker();
  void OnConfirm(const Confirm& confirm);
  void MaybeClaim();
  void OnClaimReadable();
  void AddFlight(const PGresult* rows, int row, Clock::time_point now);
  void ExtendDue();
  void SettleDue();
  void SendCompletions();
  void OnCompletionsReadable();
  void CompletionsFailed(const DbError& e);
  bool FailRejected();
  void DropExpired(const std::string& why);
  void Release(FlightList::iterator flight);
  FlightList::iterator Forget(FlightList::iterator flight);
  void ShutdownStep();
  void Stop(const std::string& why);
  void Fatal(const std::string& what, const std::string& why);
  void PollOnce();
  int PollTimeoutMillis() const;
  void MaybeLogStats();
  std::string MetricsText() const;
  [[noreturn]] void Park(const char* where) const;
  void Log(const std::string& line) const;
  void Verbose(const std::string& line) const;
  std::chrono::milliseconds Jitter(std::chrono::milliseconds backoff);

  RelaySettings settings_;
  const RelayOptions& options_;
  std::unique_ptr<Broker> broker_;
  Connection claims_;
  Connection completions_;
  Connection control_;
  SignalPipe& signals_;
  std::optional<MetricsEndpoint> metrics_;
  std::string claim_sql_;

  FlightList flights_;  // in claim order; stable addresses
  std::unordered_map<std::uint64_t, FlightList::iterator> by_token_;  // the published ones
  bool claim_in_flight_ = false;
  bool completing_ = false;  // a pgq.complete_many is under way
  bool stopping_ = false;
  bool failed_ = false;
  long claimed_jobs_ = 0;
  Clock::time_point stop_deadline_;  // stopping: unconfirmed jobs released after it
  Clock::time_point next_cancel_;    // stopping with a claim out: cancel repeated
  Clock::time_point next_broker_try_;
  std::chrono::milliseconds broker_backoff_;
  Clock::time_point next_claims_try_;
  std::chrono::milliseconds claims_backoff_;
  Clock::time_point next_claim_;  // after a claim cancelled by someone else (57014)
  Clock::time_point next_settle_try_;
  std::chrono::milliseconds settle_backoff_;
  std::string last_broker_error_;

  Counters counters_;
  std::uint64_t confirms_seen_ = 0;  // for PGQ_RELAY_DEBUG_PARK
  std::vector<double> latencies_;    // seconds, since the last stats line
  std::vector<std::uint64_t> latency_buckets_;
  double latency_sum_ = 0;
  std::uint64_t latency_count_ = 0;
  Clock::time_point next_stats_;
  std::mt19937 random_{std::random_device{}()};
};

}  // namespace pgq::cli
