// pgq-relay's command line and environment: which queue, which broker, how
// many messages in flight. Pure C++ (no libpq, no broker library):
// unit-tested in cli/tests.
#pragma once

#include <string>
#include <vector>

namespace pgq::cli {

// Where the broker is. amqp://USER:PASSWORD@HOST:PORT/VHOST (RabbitMQ; the
// user and password default to guest, the port to 5672, the virtual host to
// "/"; "%2f" and the other %XX escapes are decoded), or nats://[USER:PASSWORD@]
// HOST[:PORT] (NATS JetStream, the URL handed to libnats as it is).
// amqps:// (port 5671) and tls:// (NATS) are the same over TLS.
struct BrokerAddress {
  enum class Kind { kAmqp, kNats };
  Kind kind = Kind::kAmqp;
  bool tls = false;  // amqps:// or tls://
  std::string host;
  int port = 0;
  std::string user;
  std::string password;
  std::string vhost;  // AMQP only
  std::string url;    // as given
};

// A point where the relay stops doing anything, for the tests' kill -9
// (PGQ_RELAY_DEBUG_PARK=after-publish:N or after-confirm:N): once the Nth
// message was published (its confirm not read yet), or once the Nth confirm
// came (its job not completed yet).
struct DebugPark {
  enum class Point { kNone, kAfterPublish, kAfterConfirm };
  Point point = Point::kNone;
  long nth = 0;
};

// TLS to the broker (issue 31): the broker's certificate is checked against
// `ca` (empty: the system's trust store) and must name the URL's host, unless
// `insecure`; `cert` and `key` are the relay's own, for a broker that asks.
struct BrokerTls {
  std::string ca;         // --broker-ca, PGQ_RELAY_BROKER_CA: PEM file
  std::string cert;       // --broker-cert, PGQ_RELAY_BROKER_CERT: PEM file
  std::string key;        // --broker-key, PGQ_RELAY_BROKER_KEY: PEM file, not encrypted
  bool insecure = false;  // --broker-insecure, PGQ_RELAY_BROKER_INSECURE=1: no checks
};

// The environment's PGQ_RELAY_BROKER_CA, _CERT, _KEY and _INSECURE (nullptr: unset).
struct BrokerTlsEnvironment {
  const char* ca = nullptr;
  const char* cert = nullptr;
  const char* key = nullptr;
  const char* insecure = nullptr;
};

// The system's trust store (Debian's ca-certificates), used without --broker-ca.
inline constexpr const char* kSystemCaFile = "/etc/ssl/certs/ca-certificates.crt";

struct RelayOptions {
  BrokerAddress broker;                // the first of `brokers`
  std::vector<BrokerAddress> brokers;  // --broker, else PGQ_RELAY_BROKER: URLs, comma-separated
  std::string dsn;                     // empty: libpq's defaults (PG* variables)
  std::string queue = "to_broker";
  bool queue_given = false;            // --queue on the command line
  std::string stream;                  // --stream: relay this stream instead of a queue
  std::string consumer = "pgq-relay";  // --consumer: the stream consumer it reads as
  int concurrency = 16;                // messages awaiting confirms; 3x: jobs held
  std::string lease;                   // PostgreSQL interval; empty: the queue's
  std::string wait = "30 seconds";     // how long one claim blocks in the server
  std::string exchange = "pgq";        // RabbitMQ: where every message goes
  std::string subject_prefix;          // NATS: the subject is this and the routing key
  std::string routing_key_field;       // empty: the event's topic
  std::string confirm_timeout = "30 seconds";
  std::string shutdown_timeout = "10 seconds";
  std::string metrics_listen;               // HOST:PORT of the Prometheus endpoint; empty: none
  std::string stats_interval = "1 minute";  // the log's counters line; "0": none
  long max_jobs = 0;                        // 0: until a signal
  bool verbose = false;
  bool async_commit = false;  // --async-commit: claims and completions with synchronous_commit off
  // --declare: create the exchange (RabbitMQ) or the JetStream stream (NATS,
  // named --nats-stream, default the subject prefix with '.' as '_') when it
  // is missing.
  bool declare = false;
  std::string nats_stream;
  DebugPark park;
  BrokerTls tls;  // with amqps:// or tls:// only
};

enum class RelayParseStatus { kRun, kHelp, kUsageError };

struct RelayParseResult {
  RelayParseStatus status = RelayParseStatus::kUsageError;
  RelayOptions options;
  std::string error;  // for kUsageError: one line, no program name
};

inline constexpr int kMaxRelayConcurrency = 1000;

// args excludes the program name; broker_env and park_env are the values of
// PGQ_RELAY_BROKER and PGQ_RELAY_DEBUG_PARK (nullptr when unset).
RelayParseResult ParseRelayOptions(const std::vector<std::string>& args, const char* broker_env,
                                   const char* park_env, const BrokerTlsEnvironment& tls_env = {});

// Parses a --broker URL; false with *error set when it is not one.
bool ParseBrokerUrl(const std::string& url, BrokerAddress* out, std::string* error);

// "host:port" of --metrics-listen; false when it is not one.
bool ParseListenAddress(const std::string& text, std::string* host, int* port);

std::string RelayUsageText();

}  // namespace pgq::cli
