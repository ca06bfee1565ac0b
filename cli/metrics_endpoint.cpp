#include "metrics_endpoint.h"

#include <fcntl.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <stdexcept>
#include <system_error>

namespace pgq::cli {

namespace {

std::string Response(const char* status, const char* type, const std::string& body) {
  return std::string("HTTP/1.0 ") + status + "\r\nContent-Type: " + type +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" +
         body;
}

std::string Answer(const std::string& request, const std::function<std::string()>& metrics_text) {
  const bool metrics =
      request.rfind("GET /metrics ", 0) == 0 || request.rfind("GET /metrics?", 0) == 0;
  return metrics ? Response("200 OK", "text/plain; version=0.0.4; charset=utf-8", metrics_text())
                 : Response("404 Not Found", "text/plain", "GET /metrics\n");
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
      listen(listener.get(), 64) != 0) {
    throw std::system_error(errno, std::generic_category(),
                            "--metrics-listen " + host + ":" + service);
  }
  return MetricsEndpoint(std::move(listener));
}

void MetricsEndpoint::AddPollFds(std::vector<pollfd>* fds) const {
  fds->push_back({listener_.get(), POLLIN, 0});
  for (const Client& client : clients_) {
    fds->push_back(
        {client.fd.get(), static_cast<short>(client.answer.empty() ? POLLIN : POLLOUT), 0});
  }
}

std::optional<MetricsEndpoint::Clock::time_point> MetricsEndpoint::NextDeadline() const {
  if (clients_.empty()) return std::nullopt;
  // Oldest first, and every connection has the same budget.
  return clients_.front().deadline;
}

// What the socket has now, up to the request's blank line (or the size
// bound, or the end of input); then the answer, sent as far as the socket
// takes it.
bool MetricsEndpoint::Read(Client& client, const std::function<std::string()>& metrics_text) {
  char buffer[1024];
  bool complete = false;
  while (!complete) {
    const std::size_t room = kMaxRequestBytes - client.request.size();
    const ssize_t n = read(client.fd.get(), buffer, std::min(sizeof buffer, room));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;  // more later
    if (n < 0) return false;
    if (n > 0) client.request.append(buffer, static_cast<std::size_t>(n));
    complete = n == 0 || client.request.find("\r\n\r\n") != std::string::npos ||
               client.request.size() >= kMaxRequestBytes;
  }
  client.answer = Answer(client.request, metrics_text);
  return Write(client);
}

bool MetricsEndpoint::Write(Client& client) {
  while (client.sent < client.answer.size()) {
    const ssize_t n = send(client.fd.get(), client.answer.data() + client.sent,
                           client.answer.size() - client.sent, MSG_NOSIGNAL);
    if (n > 0) {
      client.sent += static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);  // the rest when writable
    }
  }
  return false;  // all sent: close
}

void MetricsEndpoint::Accept() {
  for (std::size_t i = 0; i < kMaxAccepts; ++i) {
    Fd fd(accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd.is_open()) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // EAGAIN: none left (or out of descriptors: tried at the next poll)
    }
    // Full: the oldest goes (an idle one, most likely; a scrape is answered
    // in the turn after its request comes).
    if (clients_.size() >= kMaxClients) clients_.erase(clients_.begin());
    clients_.push_back(Client{std::move(fd), Clock::now() + kClientBudget, {}, {}, 0});
  }
}

void MetricsEndpoint::Serve(const pollfd* ready, const std::function<std::string()>& metrics_text) {
  const Clock::time_point now = Clock::now();
  std::vector<Client> open;
  open.reserve(clients_.size() + 1);
  for (std::size_t i = 0; i < clients_.size(); ++i) {
    Client& client = clients_[i];
    const short revents = ready[1 + i].revents;
    bool keep = true;
    if ((revents & (POLLERR | POLLNVAL)) != 0) {
      keep = false;
    } else if (client.answer.empty() && (revents & (POLLIN | POLLHUP)) != 0) {
      keep = Read(client, metrics_text);
    } else if (!client.answer.empty() && (revents & (POLLOUT | POLLHUP)) != 0) {
      keep = Write(client);
    }
    if (keep && now < client.deadline) open.push_back(std::move(client));
  }
  clients_ = std::move(open);
  if ((ready[0].revents & POLLIN) != 0) Accept();
}

}  // namespace pgq::cli
