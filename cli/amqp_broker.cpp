// RabbitMQ through rabbitmq-c (Debian's librabbitmq-dev): one connection,
// one channel in confirm mode (confirm.select), every message persistent and
// mandatory. The broker acks a delivery tag once the message is in every
// queue it was routed to (on disk, for a durable queue); a message no queue
// took comes back first as a basic.return, then is acked: the return is
// matched to its tag by the message id, so that ack fails the job instead of
// completing it. A nack is the broker's "not now" (a quorum queue without a
// leader yet, a full queue that rejects publishes): the message is sent
// again over a new connection, which is what got past a stale leader on
// RabbitMQ 3.10 (make test-cluster), and no attempt is spent. amqps://
// (issue 31): rabbitmq-c's OpenSSL socket, the broker's certificate checked
// against --broker-ca and its host name against the URL's.
#include <amqp.h>
#include <amqp_ssl_socket.h>
#include <amqp_tcp_socket.h>

#include <map>
#include <unordered_map>

#include "broker.h"

namespace pgq::cli {

namespace {

using Clock = std::chrono::steady_clock;

// Heartbeats both ways, so a broker that went away without a reset (a
// machine gone, a cable pulled) is noticed within two of them. Longer than a
// GC pause or a short SIGSTOP, which should not cost a reconnect.
constexpr int kHeartbeatSeconds = 30;
constexpr int kFrameMax = 131072;
// Connecting, logging in and each setup call (channel.open, confirm.select,
// the exchange check) may take this long: the relay's loop, which keeps the
// leases alive, waits for them. A broker that does not answer in time (a
// paused one) is tried again later.
constexpr struct timeval kConnectTimeout = {2, 0};
constexpr amqp_channel_t kChannel = 1;
// How long the frames after a basic.return (its header and body) may take.
constexpr struct timeval kReturnFramesTimeout = {5, 0};

std::string Text(amqp_bytes_t bytes) {
  return std::string(static_cast<const char*>(bytes.bytes), bytes.len);
}

amqp_bytes_t Bytes(const std::string& text) {
  return amqp_bytes_t{text.size(), const_cast<char*>(text.data())};
}

class AmqpBroker : public Broker {
 public:
  AmqpBroker(const RelayOptions& options, std::chrono::milliseconds confirm_timeout)
      : addresses_(options.brokers),
        tls_(options.tls),
        exchange_(options.exchange),
        declare_(options.declare),
        confirm_timeout_(confirm_timeout) {}
  ~AmqpBroker() override { Drop(); }

  void Connect() override;
  bool connected() const override { return conn_ != nullptr; }
  void Disconnect() override { Drop(); }
  bool accepting() const override { return conn_ != nullptr && !nacked_; }
  std::uint64_t Publish(const Message& message) override;
  int fd() const override { return conn_ != nullptr ? amqp_get_sockfd(conn_) : -1; }
  void Poll(std::vector<Confirm>* confirms) override;
  std::string Describe() const override {
    const BrokerAddress& address = addresses_[current_];
    return std::string(address.tls ? "RabbitMQ (TLS) " : "RabbitMQ ") + address.host + ":" +
           std::to_string(address.port);
  }

 private:
  struct Unconfirmed {
    std::string message_id;
    Clock::time_point sent;
    std::string returned;  // why the broker returned it; empty: not returned
  };

  [[noreturn]] void Fail(const std::string& what);
  void ConnectTo(const BrokerAddress& address);
  amqp_socket_t* TlsSocket();
  std::string TlsFailure(int status, const BrokerAddress& address) const;
  void CheckReply(const char* what);
  void OnMethod(const amqp_frame_t& frame, std::vector<Confirm>* confirms);
  void OnReturn(const amqp_basic_return_t& returned);
  void Settle(std::uint64_t tag, bool multiple, bool acked, std::vector<Confirm>* confirms);
  void Drop();

  std::vector<BrokerAddress> addresses_;  // a cluster's nodes, tried in turn
  std::size_t current_ = 0;
  BrokerTls tls_;  // amqps:// only
  std::string exchange_;
  bool declare_;  // --declare: create the exchange when missing
  std::chrono::milliseconds confirm_timeout_;
  amqp_connection_state_t conn_ = nullptr;
  std::uint64_t next_tag_ = 1;  // confirm mode numbers a channel's publishes from 1
  bool nacked_ = false;         // publish no more here; a new connection once all are settled
  std::map<std::uint64_t, Unconfirmed> unconfirmed_;     // by delivery tag, oldest first
  std::unordered_map<std::string, std::uint64_t> tags_;  // message id -> delivery tag
};

void AmqpBroker::Drop() {
  if (conn_ == nullptr) return;
  // No close handshake: the connection is dropped because it failed, or the
  // relay is exiting; the broker cleans up either way.
  amqp_destroy_connection(conn_);
  conn_ = nullptr;
  unconfirmed_.clear();
  tags_.clear();
  nacked_ = false;
}

void AmqpBroker::Fail(const std::string& what) {
  Drop();
  throw BrokerError(what);
}

void AmqpBroker::CheckReply(const char* what) {
  const amqp_rpc_reply_t reply = amqp_get_rpc_reply(conn_);
  switch (reply.reply_type) {
    case AMQP_RESPONSE_NORMAL:
      return;
    case AMQP_RESPONSE_LIBRARY_EXCEPTION:
      Fail(std::string(what) + ": " + amqp_error_string2(reply.library_error));
    case AMQP_RESPONSE_SERVER_EXCEPTION:
      if (reply.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
        const auto* close = static_cast<const amqp_connection_close_t*>(reply.reply.decoded);
        Fail(std::string(what) + ": " + Text(close->reply_text));
      }
      if (reply.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
        const auto* close = static_cast<const amqp_channel_close_t*>(reply.reply.decoded);
        Fail(std::string(what) + ": " + Text(close->reply_text));
      }
      Fail(std::string(what) + ": the broker refused it");
    default:
      Fail(std::string(what) + ": no reply");
  }
}

// The node it was connected to last, then the others in turn; the error
// of the last one when none answers.
void AmqpBroker::Connect() {
  for (std::size_t tried = 0;; ++tried) {
    try {
      ConnectTo(addresses_[current_]);
      return;
    } catch (const BrokerError&) {
      if (tried + 1 >= addresses_.size()) throw;
      current_ = (current_ + 1) % addresses_.size();
    }
  }
}

void AmqpBroker::ConnectTo(const BrokerAddress& address) {
  Drop();
  conn_ = amqp_new_connection();
  if (conn_ == nullptr) throw BrokerError("out of memory for an AMQP connection");
  amqp_socket_t* socket = address.tls ? TlsSocket() : amqp_tcp_socket_new(conn_);
  if (socket == nullptr) Fail("out of memory for an AMQP socket");
  struct timeval connect_timeout = kConnectTimeout;
  struct timeval handshake_timeout = kConnectTimeout;
  struct timeval rpc_timeout = kConnectTimeout;
  int status =
      amqp_socket_open_noblock(socket, address.host.c_str(), address.port, &connect_timeout);
  if (status == AMQP_STATUS_OK) status = amqp_set_handshake_timeout(conn_, &handshake_timeout);
  if (status == AMQP_STATUS_OK) status = amqp_set_rpc_timeout(conn_, &rpc_timeout);
  if (status != AMQP_STATUS_OK) {
    Fail("cannot connect to " + Describe() + ": " +
         (address.tls ? TlsFailure(status, address) : amqp_error_string2(status)));
  }
  const amqp_rpc_reply_t login =
      amqp_login(conn_, address.vhost.c_str(), 0, kFrameMax, kHeartbeatSeconds,
                 AMQP_SASL_METHOD_PLAIN, address.user.c_str(), address.password.c_str());
  if (login.reply_type != AMQP_RESPONSE_NORMAL) {
    // A refused login closes the socket with no reason given.
    Fail("cannot log in to " + Describe() + " as " + address.user + " (virtual host " +
         address.vhost + ")" +
         (login.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION
              ? std::string(": ") + amqp_error_string2(login.library_error)
              : std::string()) +
         // Over TLS 1.3 a broker that wants the client's certificate and
         // got none says so after the handshake: at the login.
         (address.tls && tls_.cert.empty() && login.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
                  login.library_error == AMQP_STATUS_SSL_ERROR
              ? " (the broker closed the TLS connection: it may require a client certificate: "
                "--broker-cert, --broker-key)"
              : std::string()));
  }
  amqp_channel_open(conn_, kChannel);
  CheckReply("channel.open");
  amqp_confirm_select(conn_, kChannel);
  CheckReply("confirm.select");
  if (!exchange_.empty()) {
    // Passive: only whether it is there. A missing exchange would otherwise
    // close the channel at the first publish. --declare: a durable topic
    // exchange, created if missing; one that exists with another type or
    // durability is refused by RabbitMQ (406 PRECONDITION_FAILED).
    amqp_exchange_declare(conn_, kChannel, Bytes(exchange_), amqp_cstring_bytes("topic"),
                          /*passive=*/declare_ ? 0 : 1, /*durable=*/declare_ ? 1 : 0,
                          /*auto_delete=*/0, /*internal=*/0, amqp_empty_table);
    CheckReply(declare_ ? ("declaring the exchange \"" + exchange_ + "\" (durable, topic)").c_str()
                        : ("the exchange \"" + exchange_ + "\" (it must exist)").c_str());
  }
  next_tag_ = 1;
}

// A TLS socket for conn_: the CA, the relay's certificate, the checks.
// Files that cannot be used are the connection's failure (said each time).
amqp_socket_t* AmqpBroker::TlsSocket() {
  amqp_socket_t* socket = amqp_ssl_socket_new(conn_);
  if (socket == nullptr) Fail("cannot make a TLS socket (OpenSSL)");
  amqp_ssl_socket_set_verify_peer(socket, tls_.insecure ? 0 : 1);
  amqp_ssl_socket_set_verify_hostname(socket, tls_.insecure ? 0 : 1);
  if (amqp_ssl_socket_set_ssl_versions(socket, AMQP_TLSv1_2, AMQP_TLSvLATEST) != AMQP_STATUS_OK) {
    Fail("cannot require TLS 1.2 or later (OpenSSL)");
  }
  if (!tls_.insecure) {
    const std::string ca = tls_.ca.empty() ? kSystemCaFile : tls_.ca;
    if (amqp_ssl_socket_set_cacert(socket, ca.c_str()) != AMQP_STATUS_OK) {
      Fail("cannot load the CA certificates of " +
           (tls_.ca.empty() ? "the system (" + ca + ")" : "--broker-ca " + ca) +
           ": not a readable PEM file");
    }
  }
  if (!tls_.cert.empty() &&
      amqp_ssl_socket_set_key(socket, tls_.cert.c_str(), tls_.key.c_str()) != AMQP_STATUS_OK) {
    Fail("cannot load --broker-cert " + tls_.cert + " with --broker-key " + tls_.key +
         ": not readable PEM files, or the key is not the certificate's");
  }
  return socket;
}

// rabbitmq-c says which check failed, not why: the likely why, in words.
std::string AmqpBroker::TlsFailure(int status, const BrokerAddress& address) const {
  const std::string ca = tls_.ca.empty() ? "the system's trust store" : "--broker-ca " + tls_.ca;
  switch (status) {
    case AMQP_STATUS_SSL_PEER_VERIFY_FAILED:
      return "the broker's TLS certificate is not trusted: it does not chain to a CA of " + ca +
             " (or it has expired)";
    case AMQP_STATUS_SSL_HOSTNAME_VERIFY_FAILED:
      return "the broker's TLS certificate is not for the host name \"" + address.host +
             "\" (connect by a name the certificate lists)";
    case AMQP_STATUS_SSL_CONNECTION_FAILED:
      return std::string("the TLS handshake failed (") + amqp_error_string2(status) +
             "): not a TLS port, or the broker refused the relay's certificate" +
             (tls_.cert.empty() ? " (it may require one: --broker-cert, --broker-key)" : "");
    default:
      return amqp_error_string2(status);
  }
}

std::uint64_t AmqpBroker::Publish(const Message& message) {
  if (conn_ == nullptr) throw BrokerError("not connected");
  std::vector<amqp_table_entry_t> entries(message.headers.size());
  for (std::size_t i = 0; i < message.headers.size(); ++i) {
    entries[i].key = Bytes(message.headers[i].first);
    entries[i].value.kind = AMQP_FIELD_KIND_UTF8;
    entries[i].value.value.bytes = Bytes(message.headers[i].second);
  }
  amqp_basic_properties_t properties{};
  properties._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG |
                      AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_HEADERS_FLAG;
  properties.content_type = amqp_cstring_bytes("application/json");
  properties.delivery_mode = AMQP_DELIVERY_PERSISTENT;
  properties.message_id = Bytes(message.message_id);
  properties.headers.num_entries = static_cast<int>(entries.size());
  properties.headers.entries = entries.data();
  const int status =
      amqp_basic_publish(conn_, kChannel, Bytes(exchange_), Bytes(message.routing_key),
                         /*mandatory=*/1, /*immediate=*/0, &properties, Bytes(message.body));
  if (status != AMQP_STATUS_OK) Fail(std::string("basic.publish: ") + amqp_error_string2(status));
  const std::uint64_t tag = next_tag_++;
  unconfirmed_[tag] = Unconfirmed{message.message_id, Clock::now(), {}};
  tags_[message.message_id] = tag;
  return tag;
}

void AmqpBroker::Poll(std::vector<Confirm>* confirms) {
  if (conn_ == nullptr) throw BrokerError("not connected");
  if (!unconfirmed_.empty() &&
      Clock::now() - unconfirmed_.begin()->second.sent > confirm_timeout_) {
    Fail("no confirm from " + Describe() + " for " + std::to_string(confirm_timeout_.count()) +
         " ms");
  }
  for (;;) {
    amqp_frame_t frame;
    struct timeval no_wait = {0, 0};
    const int status = amqp_simple_wait_frame_noblock(conn_, &frame, &no_wait);
    if (status == AMQP_STATUS_TIMEOUT) break;
    if (status != AMQP_STATUS_OK) Fail(Describe() + ": " + amqp_error_string2(status));
    if (frame.frame_type == AMQP_FRAME_METHOD) OnMethod(frame, confirms);
  }
  // Replaced once the messages published before the nack are settled: their
  // acks would die with the connection, and they would go out twice.
  if (nacked_ && unconfirmed_.empty()) Fail(Describe() + " nacked a message; reconnecting");
  amqp_maybe_release_buffers(conn_);
}

void AmqpBroker::OnMethod(const amqp_frame_t& frame, std::vector<Confirm>* confirms) {
  switch (frame.payload.method.id) {
    case AMQP_BASIC_ACK_METHOD: {
      const auto* ack = static_cast<const amqp_basic_ack_t*>(frame.payload.method.decoded);
      Settle(ack->delivery_tag, ack->multiple != 0, true, confirms);
      break;
    }
    case AMQP_BASIC_NACK_METHOD: {
      const auto* nack = static_cast<const amqp_basic_nack_t*>(frame.payload.method.decoded);
      Settle(nack->delivery_tag, nack->multiple != 0, false, confirms);
      break;
    }
    case AMQP_BASIC_RETURN_METHOD:
      OnReturn(*static_cast<const amqp_basic_return_t*>(frame.payload.method.decoded));
      break;
    case AMQP_CHANNEL_CLOSE_METHOD: {
      const auto* close = static_cast<const amqp_channel_close_t*>(frame.payload.method.decoded);
      const std::string why = Text(close->reply_text);
      amqp_channel_close_ok_t close_ok{};
      (void)amqp_send_method(conn_, kChannel, AMQP_CHANNEL_CLOSE_OK_METHOD, &close_ok);
      Fail("the broker closed the channel: " + why);
    }
    case AMQP_CONNECTION_CLOSE_METHOD: {
      const auto* close = static_cast<const amqp_connection_close_t*>(frame.payload.method.decoded);
      const std::string why = Text(close->reply_text);
      amqp_connection_close_ok_t close_ok{};
      (void)amqp_send_method(conn_, 0, AMQP_CONNECTION_CLOSE_OK_METHOD, &close_ok);
      Fail("the broker closed the connection: " + why);
    }
    default:
      break;
  }
}

// A basic.return is followed by the message's header frame (with its
// message id) and body frames, then by the ack of its delivery tag.
void AmqpBroker::OnReturn(const amqp_basic_return_t& returned) {
  const std::string why = "returned by the broker: " + std::to_string(returned.reply_code) + " " +
                          Text(returned.reply_text) + " (exchange \"" + Text(returned.exchange) +
                          "\", routing key \"" + Text(returned.routing_key) + "\")";
  std::string message_id;
  std::uint64_t body_left = 0;
  bool header_seen = false;
  while (!header_seen || body_left > 0) {
    amqp_frame_t frame;
    struct timeval timeout = kReturnFramesTimeout;
    const int status = amqp_simple_wait_frame_noblock(conn_, &frame, &timeout);
    if (status != AMQP_STATUS_OK)
      Fail(Describe() + ": reading a returned message: " + amqp_error_string2(status));
    if (frame.frame_type == AMQP_FRAME_HEADER) {
      const auto* properties =
          static_cast<const amqp_basic_properties_t*>(frame.payload.properties.decoded);
      if (properties->_flags & AMQP_BASIC_MESSAGE_ID_FLAG)
        message_id = Text(properties->message_id);
      body_left = frame.payload.properties.body_size;
      header_seen = true;
    } else if (frame.frame_type == AMQP_FRAME_BODY) {
      const std::uint64_t got = frame.payload.body_fragment.len;
      body_left = got >= body_left ? 0 : body_left - got;
    } else {
      Fail(Describe() + ": an unexpected frame after a basic.return");
    }
  }
  const auto tag = tags_.find(message_id);
  if (tag == tags_.end()) return;  // not ours, or settled already
  const auto entry = unconfirmed_.find(tag->second);
  if (entry != unconfirmed_.end()) entry->second.returned = why;
}

void AmqpBroker::Settle(std::uint64_t tag, bool multiple, bool acked,
                        std::vector<Confirm>* confirms) {
  const auto end = unconfirmed_.upper_bound(tag);
  auto it = multiple ? unconfirmed_.begin() : unconfirmed_.find(tag);
  if (it == unconfirmed_.end()) return;
  const auto stop = multiple ? end : std::next(it);
  while (it != stop) {
    Confirm confirm;
    confirm.token = it->first;
    if (!acked) {
      confirm.kind = Confirm::Kind::kResend;
      confirm.reason = "nacked by the broker";
      nacked_ = true;
    } else if (!it->second.returned.empty()) {
      confirm.kind = Confirm::Kind::kRejected;
      confirm.reason = it->second.returned;
    }
    confirms->push_back(std::move(confirm));
    tags_.erase(it->second.message_id);
    it = unconfirmed_.erase(it);
  }
}

}  // namespace

std::unique_ptr<Broker> MakeAmqpBroker(const RelayOptions& options,
                                       std::chrono::milliseconds confirm_timeout) {
  return std::make_unique<AmqpBroker>(options, confirm_timeout);
}

}  // namespace pgq::cli
