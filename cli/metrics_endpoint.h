// pgq-relay's --metrics-listen: a minimal HTTP/1.0 server inside the relay's
// event loop, answering GET /metrics with the Prometheus text (and 404 to
// anything else).
//
// The relay's work never waits on a metrics client (issue 30 R2): every
// socket is non-blocking and polled by the relay's own poll() with the rest;
// a connection is a small state (the request read so far, the answer not yet
// sent) that moves only when its socket is ready. Bounded: at most
// kMaxClients connections (a new one closes the oldest), kMaxRequestBytes of
// request each, kClientBudget from accept to the last byte (then it is
// closed), kMaxAccepts accepted per turn of the loop.
#pragma once

#include <poll.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "process.h"

namespace pgq::cli {

class MetricsEndpoint {
 public:
  using Clock = std::chrono::steady_clock;

  static constexpr std::size_t kMaxClients = 64;
  static constexpr std::size_t kMaxAccepts = 64;
  static constexpr std::size_t kMaxRequestBytes = 8192;
  static constexpr std::chrono::milliseconds kClientBudget{5000};

  // Listens on HOST:PORT. Throws std::system_error (or std::runtime_error for
  // a host that does not resolve).
  static MetricsEndpoint Listen(const std::string& host, int port);

  // Appends the listener and every open connection, each with what it waits
  // for, to `fds`; Serve takes the same entries back after poll().
  void AddPollFds(std::vector<pollfd>* fds) const;
  // Moves every connection whose socket is ready (reads, answers, closes),
  // closes those past their budget, accepts the waiting ones. Never blocks.
  // `ready`: the entries AddPollFds appended, with poll()'s revents.
  void Serve(const pollfd* ready, const std::function<std::string()>& metrics_text);
  // The earliest time a connection runs out of budget, for poll()'s timeout.
  std::optional<Clock::time_point> NextDeadline() const;
  std::size_t open_connections() const { return clients_.size(); }

 private:
  struct Client {
    Fd fd;
    Clock::time_point deadline;
    std::string request;
    std::string answer;  // empty while the request is being read
    std::size_t sent = 0;
  };

  explicit MetricsEndpoint(Fd listener) : listener_(std::move(listener)) {}
  // False when the connection is done (answered, or broken).
  bool Read(Client& client, const std::function<std::string()>& metrics_text);
  bool Write(Client& client);
  void Accept();

  Fd listener_;
  std::vector<Client> clients_;  // oldest first
};

}  // namespace pgq::cli
