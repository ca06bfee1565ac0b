// pgq-relay: forwards the jobs of a pgq_cpp queue (the outbox's events) to
// RabbitMQ or NATS JetStream, completing each only after the broker's
// confirm (issue 20, SPEC §9, docs/adr/0019-broker-relay.md).
//
//   pgq-relay --broker URL [--dsn CONNINFO] [--queue NAME] [--concurrency N]
//             [--lease INTERVAL] [--wait INTERVAL] [--exchange NAME]
//             [--subject-prefix P] [--routing-key-field FIELD]
//             [--confirm-timeout INTERVAL] [--shutdown-timeout INTERVAL]
//             [--metrics-listen HOST:PORT] [--stats-interval INTERVAL] [--max-jobs N]
//             [--broker-ca FILE] [--broker-cert FILE --broker-key FILE] [--broker-insecure]
//
// Exit status: 0 normal end (also after SIGTERM/SIGINT), 1 connection, server
// or other error, 2 usage error. cli/README.md has the whole contract.

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "broker.h"
#include "metrics_endpoint.h"
#include "pq.h"
#include "program.h"
#include "process.h"
#include "relay.h"
#include "relay_options.h"
#include "stream_relay.h"

namespace pgq::cli {

namespace {

// A day: a longer confirm or shutdown wait is as good as none.
constexpr double kMaxWaitSeconds = 24.0 * 3600;

constexpr const char* kProgram = "pgq-relay";

int UsageError(const std::string& message) { return pgq::cli::UsageError(kProgram, message); }

std::chrono::milliseconds Millis(double seconds) {
  return std::chrono::milliseconds(
      static_cast<long long>(std::min(seconds, kMaxWaitSeconds) * 1000));
}

// The TLS files can be read: a typo is a usage error now, not a connection
// retried for ever. "" when they can.
std::string CheckTlsFiles(const BrokerTls& tls) {
  const std::pair<const char*, const std::string*> files[] = {
      {"--broker-ca", &tls.ca}, {"--broker-cert", &tls.cert}, {"--broker-key", &tls.key}};
  for (const auto& [name, path] : files) {
    if (!path->empty() && access(path->c_str(), R_OK) != 0) {
      return std::string(name) + ": cannot read " + *path + ": " + std::strerror(errno);
    }
  }
  return "";
}

int Main(const std::vector<std::string>& args) {
  BrokerTlsEnvironment tls_env;
  tls_env.ca = std::getenv("PGQ_RELAY_BROKER_CA");
  tls_env.cert = std::getenv("PGQ_RELAY_BROKER_CERT");
  tls_env.key = std::getenv("PGQ_RELAY_BROKER_KEY");
  tls_env.insecure = std::getenv("PGQ_RELAY_BROKER_INSECURE");
  const RelayParseResult parsed = ParseRelayOptions(args, std::getenv("PGQ_RELAY_BROKER"),
                                                    std::getenv("PGQ_RELAY_DEBUG_PARK"), tls_env);
  if (parsed.status == RelayParseStatus::kHelp) {
    std::fputs(RelayUsageText().c_str(), stdout);
    return kExitOk;
  }
  if (parsed.status == RelayParseStatus::kUsageError) return UsageError(parsed.error);
  if (const std::string tls_error = CheckTlsFiles(parsed.options.tls); !tls_error.empty()) {
    return UsageError(tls_error);
  }
  if (parsed.options.tls.insecure) {
    std::fprintf(stderr,
                 "%s: warning: --broker-insecure: the broker's TLS certificate and host name are "
                 "not checked; whoever sits between the relay and the broker can read and change "
                 "the messages\n",
                 kProgram);
  }
  RelaySettings settings;
  settings.options = parsed.options;
  const RelayOptions& options = settings.options;

  // Before connecting: a stop signal that comes meanwhile is kept in the pipe.
  SignalPipe signals = SignalPipe::Install();
  // --async-commit: the relay's own transactions (claim and completion; with
  // --stream, next_batch and finish_batch on its one session) do not wait for
  // their commit's WAL flush. Extensions, failures and releases stay
  // synchronous (the queue relay's control session).
  const std::string async = options.async_commit ? "-c synchronous_commit=off" : "";
  Connection control =
      Connection::Open(options.dsn, "pgq-relay", options.stream.empty() ? std::string() : async);
  // The intervals, read by the server's parser.
  std::string error;
  const auto interval = [&](const char* name, const std::string& text,
                            bool may_be_zero) -> std::optional<double> {
    const std::optional<double> seconds = IntervalSeconds(control, text, &error);
    if (!seconds) {
      error = std::string(name) + ": " + error;
    } else if (*seconds < 0 || (*seconds == 0 && !may_be_zero)) {
      error = std::string(name) + (may_be_zero ? " must not be negative" : " must be more than 0");
      return std::nullopt;
    }
    return seconds;
  };
  std::optional<double> seconds;
  if (!options.lease.empty()) {
    if (!(seconds = interval("--lease", options.lease, false))) return UsageError(error);
    settings.lease_seconds = *seconds;
  }
  if (!(seconds = interval("--wait", options.wait, false))) return UsageError(error);
  if (!(seconds = interval("--confirm-timeout", options.confirm_timeout, false))) {
    return UsageError(error);
  }
  const std::chrono::milliseconds confirm_timeout = Millis(*seconds);
  if (!(seconds = interval("--shutdown-timeout", options.shutdown_timeout, true))) {
    return UsageError(error);
  }
  settings.shutdown_timeout = Millis(*seconds);
  if (!(seconds = interval("--stats-interval", options.stats_interval, true))) {
    return UsageError(error);
  }
  settings.stats_interval = Millis(*seconds);

  std::optional<MetricsEndpoint> metrics;
  if (!options.metrics_listen.empty()) {
    std::string host;
    int port = 0;
    ParseListenAddress(options.metrics_listen, &host, &port);
    metrics = MetricsEndpoint::Listen(host, port);
  }
  std::unique_ptr<Broker> broker = options.broker.kind == BrokerAddress::Kind::kAmqp
                                       ? MakeAmqpBroker(options, confirm_timeout)
                                       : MakeNatsBroker(options, confirm_timeout);
  // What the server made of it, in the log: a pooler or a role setting may
  // not pass the startup option on.
  const auto say_commit_mode = [&](Connection& connection) {
    if (!options.async_commit) return;
    const Result mode = connection.Exec("SHOW synchronous_commit", {});
    LogLine(kProgram, std::string("--async-commit: synchronous_commit = ") +
                          PQgetvalue(mode.get(), 0, 0) + " for claims and completions");
  };
  if (!options.stream.empty()) {
    say_commit_mode(control);
    StreamRelay relay(options, settings.shutdown_timeout, settings.stats_interval,
                      std::move(broker), std::move(control), signals);
    return relay.Run();
  }
  Connection claims = Connection::Open(options.dsn, "pgq-relay", async);
  Connection completions = Connection::Open(options.dsn, "pgq-relay", async);
  say_commit_mode(completions);
  Relay relay(std::move(settings), std::move(broker), std::move(claims), std::move(completions),
              std::move(control), signals, std::move(metrics));
  return relay.Run();
}

}  // namespace

}  // namespace pgq::cli

int main(int argc, char** argv) {
  return pgq::cli::RunProgram(pgq::cli::kProgram, argc, argv, pgq::cli::Main);
}
