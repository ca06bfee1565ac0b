// pgq-relay's --metrics-listen: a minimal HTTP/1.0 server inside the relay's
// event loop, answering GET /metrics with the Prometheus text (and 404 to
// anything else). Each request is read and answered at once, bounded in
// time, so a slow scraper delays the relay by at most kClientBudget.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "process.h"

namespace pgq::cli {

class MetricsEndpoint {
 public:
  // Listens on HOST:PORT. Throws std::system_error (or std::runtime_error for
  // a host that does not resolve).
  static MetricsEndpoint Listen(const std::string& host, int port);

  int fd() const { return listener_.get(); }
  // Answers the connections waiting to be accepted.
  void Serve(const std::function<std::string()>& metrics_text);

 private:
  explicit MetricsEndpoint(Fd listener) : listener_(std::move(listener)) {}
  Fd listener_;
};

}  // namespace pgq::cli
