#include "metrics_endpoint.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <stdexcept>
#include <system_error>

namespace pgq::cli {

namespace {

using Clock = std::chrono::steady_clock;

// The time one request may take from accept to the last byte written.
constexpr auto kClientBudget = std::chrono::milliseconds(500);
constexpr std::size_t kMaxRequestBytes = 8192;

int MillisLeft(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

bool WaitFor(int fd, short events, Clock::time_point deadline) {
  pollfd entry{fd, events, 0};
  int ready;
  do {
    ready = poll(&entry, 1, MillisLeft(deadline));
  } while (ready < 0 && errno == EINTR);
  return ready > 0;
}

// The request's head, up to its blank line (or what came in time).
std::string ReadRequest(int fd, Clock::time_point deadline) {
  std::string request;
  char buffer[1024];
  while (request.find("\r\n\r\n") == std::string::npos && request.size() < kMaxRequestBytes) {
    if (!WaitFor(fd, POLLIN, deadline)) break;
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) break;
    request.append(buffer, static_cast<std::size_t>(n));
  }
  return request;
}

void WriteAll(int fd, const std::string& bytes, Clock::time_point deadline) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN && WaitFor(fd, POLLOUT, deadline)) {
      continue;
    } else {
      return;
    }
  }
}

std::string Response(const char* status, const char* type, const std::string& body) {
  return std::string("HTTP/1.0 ") + status + "\r\nContent-Type: " + type +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" +
         body;
}

}  // namespace

MetricsEndpoint MetricsEndpoint::Listen(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  const int status = getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
  if (status != 0) {
    throw std::runtime_error("--metrics-listen " + host + ": " + gai_strerror(status));
  }
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> addresses(found, freeaddrinfo);
  Fd listener(socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!listener.is_open()) throw std::system_error(errno, std::generic_category(), "socket");
  const int on = 1;
  (void)setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  if (bind(listener.get(), found->ai_addr, found->ai_addrlen) != 0 ||
      listen(listener.get(), 16) != 0) {
    throw std::system_error(errno, std::generic_category(),
                            "--metrics-listen " + host + ":" + service);
  }
  return MetricsEndpoint(std::move(listener));
}

void MetricsEndpoint::Serve(const std::function<std::string()>& metrics_text) {
  for (;;) {
    Fd client(accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!client.is_open()) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // EAGAIN: none left (or out of descriptors: tried at the next poll)
    }
    const Clock::time_point deadline = Clock::now() + kClientBudget;
    const std::string request = ReadRequest(client.get(), deadline);
    const bool metrics =
        request.rfind("GET /metrics ", 0) == 0 || request.rfind("GET /metrics?", 0) == 0;
    WriteAll(client.get(),
             metrics
                 ? Response("200 OK", "text/plain; version=0.0.4; charset=utf-8", metrics_text())
                 : Response("404 Not Found", "text/plain", "GET /metrics\n"),
             deadline);
  }
}

}  // namespace pgq::cli
