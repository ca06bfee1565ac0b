// The broker side of pgq-relay: publish a persistent message, learn later
// whether the broker took it. RabbitMQ (rabbitmq-c, publisher confirms) in
// amqp_broker.cpp; NATS JetStream (cnats, asynchronous publish acks) in
// nats_broker.cpp. One thread drives either: the relay's event loop polls
// fd() and calls Poll() when it is readable, and at least once a second (for
// AMQP heartbeats and the confirm timeout).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "relay_message.h"
#include "relay_options.h"

namespace pgq::cli {

// The connection to the broker failed, or was never made: every message not
// confirmed yet is in doubt, and is published again on the next connection.
class BrokerError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What became of one published message, by the token Publish returned.
struct Confirm {
  enum class Kind {
    kAck,       // the broker has it (on disk, for a persistent message)
    kRejected,  // returned (no queue took it) or refused for good: fail the job
    kResend,    // not now (nacked, timed out, the broker not ready): publish again
  };
  std::uint64_t token = 0;
  Kind kind = Kind::kAck;
  std::string reason;  // kRejected, kResend: the broker's words
};

class Broker {
 public:
  virtual ~Broker() = default;

  // Connects (or reconnects, dropping an old connection). Throws BrokerError.
  virtual void Connect() = 0;
  virtual bool connected() const = 0;
  // Drops the connection: what was not confirmed is in doubt.
  virtual void Disconnect() = 0;

  // Sends one message; its token comes back in a Confirm. Throws BrokerError
  // (then disconnected).
  virtual std::uint64_t Publish(const Message& message) = 0;

  // Whether to publish now: false while a connection that refused messages
  // waits for its earlier ones' confirms before it is replaced.
  virtual bool accepting() const { return connected(); }

  // The descriptor to poll for input; -1 when there is none.
  virtual int fd() const = 0;
  // Appends the confirms that came, without blocking. Throws BrokerError
  // (then disconnected).
  virtual void Poll(std::vector<Confirm>* confirms) = 0;

  // "RabbitMQ 127.0.0.1:5672", for the log.
  virtual std::string Describe() const = 0;
};

// confirm_timeout: a message unconfirmed for longer means the connection is
// gone (a broker paused or cut off without a reset): Poll then throws.
std::unique_ptr<Broker> MakeAmqpBroker(const RelayOptions& options,
                                       std::chrono::milliseconds confirm_timeout);
std::unique_ptr<Broker> MakeNatsBroker(const RelayOptions& options,
                                       std::chrono::milliseconds confirm_timeout);

}  // namespace pgq::cli
