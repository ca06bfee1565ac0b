// NATS JetStream through cnats (Debian's libnats-dev): asynchronous publishes
// with the message id in Nats-Msg-Id, so a message published again after a
// crash or a timeout is dropped by the stream inside its duplicate window.
// cnats reconnects by itself and calls the ack handler on a thread of its
// own: the handler queues the confirm and writes a byte to a pipe, which the
// relay's loop polls like any other input. tls:// (issue 31): cnats'
// OpenSSL connection, the server's certificate checked against --broker-ca
// and its host name against the URL's (SetTls).
#include <fcntl.h>
#include <nats/nats.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>
#include <unordered_map>

#include "broker.h"
#include "process.h"

namespace pgq::cli {

namespace {

using Clock = std::chrono::steady_clock;

// cnats' own reconnect: every 250 ms, forever (the relay holds its leases
// meanwhile); publishes made while it is away are buffered (up to 8 MB) and
// sent when it is back.
constexpr int64_t kReconnectWaitMs = 250;
constexpr int64_t kConnectTimeoutMs = 5000;
// Past the confirm timeout, how long cnats has to report its own time-out.
constexpr auto kTimeoutSlack = std::chrono::seconds(5);

std::string StatusText(natsStatus status) {
  const char* last = nats_GetLastError(nullptr);
  return last != nullptr && *last != '\0' ? last : natsStatus_GetText(status);
}

class NatsBroker : public Broker {
 public:
  NatsBroker(const RelayOptions& options, std::chrono::milliseconds confirm_timeout)
      : describe_(std::string(options.broker.tls ? "NATS (TLS) " : "NATS ") + options.broker.host +
                  ":" + std::to_string(options.broker.port) +
                  (options.brokers.size() > 1
                       ? " (and " + std::to_string(options.brokers.size() - 1) + " more)"
                       : "")),
        confirm_timeout_(confirm_timeout),
        max_pending_(options.concurrency),
        tls_(options.broker.tls),
        tls_options_(options.tls),
        host_(options.broker.host),
        declare_stream_(options.declare ? options.nats_stream : std::string()),
        declare_subject_(options.subject_prefix + ">") {
    for (const BrokerAddress& address : options.brokers) {
      urls_.push_back(address.url);
      if (address.host != host_) one_host_ = false;
    }
    int ends[2];
    if (pipe2(ends, O_CLOEXEC | O_NONBLOCK) != 0) throw BrokerError("pipe2 failed");
    wake_read_ = Fd(ends[0]);
    wake_write_ = Fd(ends[1]);
  }
  ~NatsBroker() override { Drop(); }

  void Connect() override;
  bool connected() const override { return conn_ != nullptr; }
  void Disconnect() override { Drop(); }
  std::uint64_t Publish(const Message& message) override;
  int fd() const override { return wake_read_.get(); }
  void Poll(std::vector<Confirm>* confirms) override;
  std::string Describe() const override { return describe_; }

 private:
  struct Unconfirmed {
    std::uint64_t token;
    Clock::time_point sent;
  };

  natsStatus SetTls(natsOptions* options, std::string* what);
  std::string TlsHint(const std::string& why) const;
  static void OnAck(jsCtx* js, natsMsg* msg, jsPubAck* ack, jsPubAckErr* error, void* closure);
  void Acked(natsMsg* msg, const jsPubAck* ack, const jsPubAckErr* error);
  void Drop();
  void DeclareStream();

  std::vector<std::string> urls_;  // a cluster's servers: cnats picks and fails over
  std::string describe_;
  std::chrono::milliseconds confirm_timeout_;
  int max_pending_;
  bool tls_;                     // tls://
  BrokerTls tls_options_;        // tls:// only
  std::string host_;             // the first URL's: the name its certificate must list
  bool one_host_ = true;         // every URL names host_
  std::string declare_stream_;   // --declare: this stream, created if missing; "": none
  std::string declare_subject_;  // the subjects it takes: PREFIX>
  natsConnection* conn_ = nullptr;
  jsCtx* js_ = nullptr;
  Fd wake_read_;
  Fd wake_write_;
  std::uint64_t next_token_ = 1;

  // Shared with cnats' thread.
  std::mutex mutex_;
  std::unordered_map<std::string, Unconfirmed> unconfirmed_;  // by message id
  std::vector<Confirm> arrived_;
};

void NatsBroker::Drop() {
  if (js_ != nullptr) jsCtx_Destroy(js_);
  js_ = nullptr;
  // Closes the connection and waits for its threads: no handler runs after.
  if (conn_ != nullptr) natsConnection_Destroy(conn_);
  conn_ = nullptr;
  std::lock_guard<std::mutex> lock(mutex_);
  unconfirmed_.clear();
  arrived_.clear();
}

void NatsBroker::Connect() {
  Drop();
  natsOptions* options = nullptr;
  natsStatus status = natsOptions_Create(&options);
  std::vector<const char*> urls;
  for (const std::string& url : urls_) urls.push_back(url.c_str());
  if (status == NATS_OK) {
    status = natsOptions_SetServers(options, urls.data(), static_cast<int>(urls.size()));
  }
  if (status == NATS_OK) status = natsOptions_SetTimeout(options, kConnectTimeoutMs);
  if (status == NATS_OK) status = natsOptions_SetMaxReconnect(options, -1);
  if (status == NATS_OK) status = natsOptions_SetReconnectWait(options, kReconnectWaitMs);
  std::string what;  // what a failed TLS setting was
  if (status == NATS_OK && tls_) status = SetTls(options, &what);
  if (status == NATS_OK) status = natsConnection_Connect(&conn_, options);
  natsOptions_Destroy(options);
  if (status != NATS_OK) {
    std::string why = StatusText(status);
    if (!what.empty()) {
      why = what + ": " + why;
    } else if (tls_) {
      why += TlsHint(why);
    }
    Drop();
    throw BrokerError("cannot connect to " + describe_ + ": " + why);
  }
  jsOptions js_options;
  jsOptions_Init(&js_options);
  js_options.PublishAsync.AckHandler = &NatsBroker::OnAck;
  js_options.PublishAsync.AckHandlerClosure = this;
  // The relay never has more in flight than its concurrency.
  js_options.PublishAsync.MaxPending = max_pending_;
  status = natsConnection_JetStream(&js_, conn_, &js_options);
  if (status != NATS_OK) {
    const std::string why = StatusText(status);
    Drop();
    throw BrokerError("JetStream on " + describe_ + ": " + why);
  }
  if (!declare_stream_.empty()) DeclareStream();
}

// --declare: the stream that stores what the relay publishes. One that
// exists is used when it takes PREFIX> (or every subject), whatever its other
// settings; created otherwise with file storage, limits retention, a
// duplicate window of 2 minutes (a message id published again within it is
// dropped) and the server's defaults for the rest (no limits, 1 replica).
void NatsBroker::DeclareStream() {
  const std::string what = "the JetStream stream \"" + declare_stream_ + "\"";
  jsStreamInfo* info = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  natsStatus status = js_GetStreamInfo(&info, js_, declare_stream_.c_str(), nullptr, &code);
  if (status == NATS_OK) {
    bool takes = false;
    std::string subjects;
    for (int i = 0; i < info->Config->SubjectsLen; ++i) {
      const std::string subject = info->Config->Subjects[i];
      takes = takes || subject == declare_subject_ || subject == ">";
      subjects += (i > 0 ? ", " : "") + subject;
    }
    jsStreamInfo_Destroy(info);
    if (takes) return;
    Drop();
    throw BrokerError(what + " exists with the subjects [" + subjects + "], not " +
                      declare_subject_ + ": the relay's messages would not be stored in it");
  }
  if (code != JSStreamNotFoundErr) {
    const std::string why = StatusText(status);
    Drop();
    throw BrokerError("looking up " + what + ": " + why);
  }
  jsStreamConfig config;
  jsStreamConfig_Init(&config);
  const char* subjects[] = {declare_subject_.c_str()};
  config.Name = declare_stream_.c_str();
  config.Subjects = subjects;
  config.SubjectsLen = 1;
  config.Storage = js_FileStorage;
  config.Retention = js_LimitsPolicy;
  config.Duplicates = 120LL * 1000000000LL;  // 2 minutes, in nanoseconds
  status = js_AddStream(&info, js_, &config, nullptr, &code);
  if (status != NATS_OK) {
    const std::string why = StatusText(status);
    Drop();
    throw BrokerError("creating " + what + " (subjects " + declare_subject_ + "): " + why);
  }
  jsStreamInfo_Destroy(info);
}

// TLS on, the CA, the relay's certificate, the checks. cnats checks the
// certificate's chain, and each server's host name when it is built with
// NATS_BUILD_TLS_FORCE_HOST_VERIFY (Debian's is: the URL's host, or the name
// a discovered server was found under); built without it, only a name it is
// given. The relay gives it the URLs' host when they all name one (several
// ports of one host, the usual single server); a cluster's URLs naming
// several hosts are left to cnats' own check, one name for all would refuse
// every server but one.
natsStatus NatsBroker::SetTls(natsOptions* options, std::string* what) {
  natsStatus status = natsOptions_SetSecure(options, true);
  if (status != NATS_OK) {
    *what = "cannot turn TLS on";
    return status;
  }
  if (tls_options_.insecure) return natsOptions_SkipServerVerification(options, true);
  const std::string ca = tls_options_.ca.empty() ? kSystemCaFile : tls_options_.ca;
  status = natsOptions_LoadCATrustedCertificates(options, ca.c_str());
  if (status != NATS_OK) {
    *what = "cannot load the CA certificates of " +
            (tls_options_.ca.empty() ? "the system (" + ca + ")" : "--broker-ca " + ca);
    return status;
  }
  if (!tls_options_.cert.empty()) {
    status = natsOptions_LoadCertificatesChain(options, tls_options_.cert.c_str(),
                                               tls_options_.key.c_str());
    if (status != NATS_OK) {
      *what = "cannot load --broker-cert " + tls_options_.cert + " with --broker-key " +
              tls_options_.key;
      return status;
    }
  }
  if (!one_host_) return NATS_OK;
  status = natsOptions_SetExpectedHostname(options, host_.c_str());
  if (status != NATS_OK) *what = "cannot set the expected host name";
  return status;
}

// cnats passes OpenSSL's verify error on ("SSL handshake error: 20:unable
// to get local issuer certificate:...", "64:IP address mismatch:..."): what
// it means for the options, in words. A server that wants a client
// certificate and got none closes the connection after the handshake
// (TLS 1.3), which cnats reports as a missing PONG.
std::string NatsBroker::TlsHint(const std::string& why) const {
  if (why.find("SSL handshake error") != std::string::npos) {
    if (why.find("mismatch") != std::string::npos) {
      return " (the broker's TLS certificate is not for the host name " +
             (one_host_ ? "\"" + host_ + "\"" : std::string("of its URL")) +
             ": connect by a name the certificate lists)";
    }
    return " (the broker's TLS certificate is not trusted: it does not chain to a CA of " +
           (tls_options_.ca.empty() ? std::string("the system's trust store")
                                    : "--broker-ca " + tls_options_.ca) +
           ", or it has expired)";
  }
  if (tls_options_.cert.empty() && why.find("PONG") != std::string::npos) {
    return " (the broker closed the TLS connection: it may require a client certificate: "
           "--broker-cert, --broker-key)";
  }
  return "";
}

std::uint64_t NatsBroker::Publish(const Message& message) {
  if (js_ == nullptr) throw BrokerError("not connected");
  natsMsg* msg = nullptr;
  natsStatus status = natsMsg_Create(&msg, message.routing_key.c_str(), nullptr,
                                     message.body.data(), static_cast<int>(message.body.size()));
  for (const auto& [name, value] : message.headers) {
    if (status == NATS_OK) status = natsMsgHeader_Set(msg, name.c_str(), value.c_str());
  }
  const std::uint64_t token = next_token_++;
  if (status == NATS_OK) {
    std::lock_guard<std::mutex> lock(mutex_);
    unconfirmed_[message.message_id] = Unconfirmed{token, Clock::now()};
  }
  jsPubOptions publish;
  jsPubOptions_Init(&publish);
  publish.MsgId = message.message_id.c_str();  // Nats-Msg-Id: the stream's duplicate window
  publish.MaxWait = confirm_timeout_.count();  // then the handler gets a timeout
  if (status == NATS_OK) status = js_PublishMsgAsync(js_, &msg, &publish);
  natsMsg_Destroy(msg);  // nothing when cnats took it
  if (status != NATS_OK) {
    const std::string why = StatusText(status);
    Drop();
    throw BrokerError("publishing to " + describe_ + ": " + why);
  }
  return token;
}

void NatsBroker::OnAck(jsCtx*, natsMsg* msg, jsPubAck* ack, jsPubAckErr* error, void* closure) {
  static_cast<NatsBroker*>(closure)->Acked(msg, ack, error);
  natsMsg_Destroy(msg);
}

void NatsBroker::Acked(natsMsg* msg, const jsPubAck* ack, const jsPubAckErr* error) {
  const char* id = nullptr;
  if (msg == nullptr || natsMsgHeader_Get(msg, "Nats-Msg-Id", &id) != NATS_OK || id == nullptr) {
    return;
  }
  Confirm confirm;
  if (ack != nullptr) {
    confirm.kind = Confirm::Kind::kAck;
  } else if (error != nullptr && error->ErrCode != 0) {
    // JetStream refused it (a limit of the stream, a wrong sequence...).
    confirm.kind = Confirm::Kind::kRejected;
    confirm.reason = std::string("refused by JetStream: ") +
                     (error->ErrText != nullptr ? error->ErrText : "") + " (error " +
                     std::to_string(error->ErrCode) + ")";
  } else {
    // Timed out, or no stream answered (restarting, or none takes the
    // subject): not known, so sent again.
    confirm.kind = Confirm::Kind::kResend;
    confirm.reason = error != nullptr ? natsStatus_GetText(error->Err) : "no answer";
  }
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = unconfirmed_.find(id);
  if (it == unconfirmed_.end()) return;  // dropped by a reconnect
  confirm.token = it->second.token;
  unconfirmed_.erase(it);
  arrived_.push_back(std::move(confirm));
  const char byte = 0;
  // A full pipe has wakened the loop already.
  while (write(wake_write_.get(), &byte, 1) < 0 && errno == EINTR) {
  }
}

void NatsBroker::Poll(std::vector<Confirm>* confirms) {
  char bytes[256];
  while (read(wake_read_.get(), bytes, sizeof bytes) > 0) {
  }
  if (conn_ == nullptr) throw BrokerError("not connected");
  if (natsConnection_IsClosed(conn_)) {
    Drop();
    throw BrokerError(describe_ + ": the connection was closed");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  for (Confirm& confirm : arrived_) confirms->push_back(std::move(confirm));
  arrived_.clear();
  // cnats times each publish out after MaxWait; should an answer still not
  // come (nothing is ever left waiting for good), it is sent again.
  const Clock::time_point overdue = Clock::now() - confirm_timeout_ - kTimeoutSlack;
  for (auto it = unconfirmed_.begin(); it != unconfirmed_.end();) {
    if (it->second.sent > overdue) {
      ++it;
      continue;
    }
    Confirm confirm;
    confirm.token = it->second.token;
    confirm.kind = Confirm::Kind::kResend;
    confirm.reason = "no answer within the confirm timeout";
    confirms->push_back(std::move(confirm));
    it = unconfirmed_.erase(it);
  }
}

}  // namespace

std::unique_ptr<Broker> MakeNatsBroker(const RelayOptions& options,
                                       std::chrono::milliseconds confirm_timeout) {
  return std::make_unique<NatsBroker>(options, confirm_timeout);
}

}  // namespace pgq::cli
