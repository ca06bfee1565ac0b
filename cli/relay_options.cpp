#include "relay_options.h"

#include <algorithm>
#include <cctype>

#include "options.h"

namespace pgq::cli {

namespace {

RelayParseResult Error(std::string message) {
  RelayParseResult result;
  result.error = std::move(message);
  return result;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// %XX escapes of a URL part decoded; false on a broken one.
bool Unescape(const std::string& text, std::string* out) {
  out->clear();
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      *out += text[i];
      continue;
    }
    if (i + 2 >= text.size()) return false;
    const int high = HexValue(text[i + 1]);
    const int low = HexValue(text[i + 2]);
    if (high < 0 || low < 0) return false;
    *out += static_cast<char>(high * 16 + low);
    i += 2;
  }
  return true;
}

// "host", "host:port" or "[v6]:port"; port stays as it was when absent.
bool SplitHostPort(const std::string& text, std::string* host, int* port) {
  std::string port_text;
  if (!text.empty() && text.front() == '[') {
    const std::size_t close = text.find(']');
    if (close == std::string::npos) return false;
    *host = text.substr(1, close - 1);
    if (close + 1 < text.size()) {
      if (text[close + 1] != ':') return false;
      port_text = text.substr(close + 2);
    }
  } else {
    const std::size_t colon = text.rfind(':');
    *host = text.substr(0, colon);
    if (colon != std::string::npos) port_text = text.substr(colon + 1);
  }
  if (host->empty()) return false;
  if (port_text.empty()) return text.back() != ':';
  long number = 0;
  if (!ParseNumber(port_text, 1, 65535, &number)) return false;
  *port = static_cast<int>(number);
  return true;
}

// The TLS options fit the URLs: "" when they do, else why not.
std::string CheckTls(const RelayOptions& options) {
  for (const BrokerAddress& address : options.brokers) {
    if (address.tls != options.brokers.front().tls) {
      return "--broker: the URLs of one relay all use TLS (amqps://, tls://) or none does";
    }
  }
  const BrokerTls& tls = options.tls;
  const bool any = !tls.ca.empty() || !tls.cert.empty() || !tls.key.empty() || tls.insecure;
  if (any && !options.broker.tls) {
    return "--broker-ca, --broker-cert, --broker-key and --broker-insecure are for TLS: use an "
           "amqps:// or tls:// URL";
  }
  if (tls.cert.empty() != tls.key.empty()) return "--broker-cert and --broker-key go together";
  if (tls.insecure && !tls.ca.empty()) {
    return "--broker-insecure and --broker-ca exclude each other (--broker-insecure checks no "
           "certificate)";
  }
  return "";
}

bool ParsePark(const std::string& text, DebugPark* out) {
  const std::size_t colon = text.find(':');
  if (colon == std::string::npos) return false;
  const std::string point = text.substr(0, colon);
  if (point == "after-publish") {
    out->point = DebugPark::Point::kAfterPublish;
  } else if (point == "after-confirm") {
    out->point = DebugPark::Point::kAfterConfirm;
  } else {
    return false;
  }
  return ParseNumber(text.substr(colon + 1), 1, 1000000000L, &out->nth);
}

}  // namespace

bool ParseBrokerUrl(const std::string& url, BrokerAddress* out, std::string* error) {
  BrokerAddress address;
  address.url = url;
  std::string rest;
  const std::size_t scheme_end = url.find("://");
  const std::string scheme = url.substr(0, scheme_end);
  if (scheme_end == std::string::npos) {
    *error = "--broker must be an amqp:// or nats:// URL (amqps:// or tls:// for TLS)";
    return false;
  } else if (scheme == "amqp" || scheme == "amqps") {
    address.kind = BrokerAddress::Kind::kAmqp;
    address.tls = scheme == "amqps";
    address.port = address.tls ? 5671 : 5672;
    address.user = address.password = "guest";
    address.vhost = "/";
  } else if (scheme == "nats" || scheme == "tls") {
    address.kind = BrokerAddress::Kind::kNats;
    address.tls = scheme == "tls";
    address.port = 4222;
  } else {
    *error = "--broker must be an amqp:// or nats:// URL (amqps:// or tls:// for TLS)";
    return false;
  }
  rest = url.substr(scheme_end + 3);
  std::string path;
  const std::size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    path = rest.substr(slash + 1);
    rest.resize(slash);
  }
  const std::size_t at = rest.rfind('@');
  if (at != std::string::npos) {
    const std::string userinfo = rest.substr(0, at);
    rest = rest.substr(at + 1);
    const std::size_t colon = userinfo.find(':');
    if (!Unescape(userinfo.substr(0, colon), &address.user) ||
        (colon != std::string::npos && !Unescape(userinfo.substr(colon + 1), &address.password))) {
      *error = "--broker: a broken %-escape in the user or password";
      return false;
    }
    if (colon == std::string::npos) address.password.clear();
  }
  if (!SplitHostPort(rest, &address.host, &address.port)) {
    *error = "--broker: no host, or a bad port, in the " + scheme + ":// URL";
    return false;
  }
  if (address.kind == BrokerAddress::Kind::kAmqp) {
    // amqp://host/ is the virtual host "" in the AMQP URI spec, but every
    // broker's default is "/", which is what people mean by it.
    if (!path.empty() && !Unescape(path, &address.vhost)) {
      *error = "--broker: a broken %-escape in the virtual host";
      return false;
    }
  } else if (!path.empty()) {
    *error = "--broker: a " + scheme + ":// URL has no path";
    return false;
  }
  *out = std::move(address);
  return true;
}

bool ParseListenAddress(const std::string& text, std::string* host, int* port) {
  *port = 0;
  return SplitHostPort(text, host, port) && *port != 0;
}

std::string RelayUsageText() {
  return "Usage: pgq-relay --broker URL [options]\n"
         "\n"
         "Forwards the jobs of a pgq_cpp queue (the outbox's events: pgq.publish) to\n"
         "RabbitMQ or NATS JetStream as persistent messages, and completes each job only\n"
         "once the broker confirmed its message. At-least-once: a message id stable\n"
         "across retries (pgq-QUEUE-JOBID) lets consumers drop the duplicates a crash can\n"
         "cause; events of one group key (pgq.publish's group_key) go one at a time,\n"
         "in commit order.\n"
         "\n"
         "Options:\n"
         "  --broker URL[,URL...]\n"
         "                      amqp://USER:PASSWORD@HOST:PORT/VHOST (RabbitMQ) or\n"
         "                      nats://HOST:PORT (JetStream); several: a cluster's nodes,\n"
         "                      tried in turn; default: $PGQ_RELAY_BROKER (keeps a\n"
         "                      password off the command line)\n"
         "                      amqps://... and tls://HOST:PORT: the same over TLS\n"
         "  --broker-ca FILE    TLS: the CA certificates (PEM) the broker's certificate\n"
         "                      must chain to (default: the system's trust store,\n"
         "                      /etc/ssl/certs/ca-certificates.crt)\n"
         "  --broker-cert FILE, --broker-key FILE\n"
         "                      TLS: the relay's certificate and key (PEM), for a\n"
         "                      broker that asks for one\n"
         "  --broker-insecure   TLS: check neither the broker's certificate nor its host\n"
         "                      name (a warning is logged; for a test bench only)\n"
         "                      The four TLS options may come from PGQ_RELAY_BROKER_CA,\n"
         "                      PGQ_RELAY_BROKER_CERT, PGQ_RELAY_BROKER_KEY and\n"
         "                      PGQ_RELAY_BROKER_INSECURE=1 instead\n"
         "  --dsn CONNINFO      libpq connection string or URI (default: PG* variables)\n"
         "  --queue NAME        the queue to forward (default to_broker)\n"
         "  --stream NAME       forward a stream instead (pgq.next_batch as a registered\n"
         "                      consumer; a batch of up to --concurrency events at a\n"
         "                      time, finished once every message is confirmed)\n"
         "  --consumer NAME     the stream consumer to read as (default pgq-relay);\n"
         "                      one relay per stream and consumer runs, others stand by\n"
         "  --concurrency N     messages waiting for the broker's confirm at once\n"
         "                      (default 16, at most 1000); the next N are claimed\n"
         "                      meanwhile: at most 3N jobs held\n"
         "  --lease INTERVAL    lease of each claim (default: the queue's)\n"
         "  --wait INTERVAL     how long one claim waits in the server for a job\n"
         "                      (default '30 seconds')\n"
         "  --exchange NAME     RabbitMQ: the exchange every message goes to (default\n"
         "                      pgq; it must exist, or --declare)\n"
         "  --subject-prefix P  NATS: the subject is P followed by the routing key\n"
         "  --routing-key-field FIELD\n"
         "                      the routing key is this field of the payload (text),\n"
         "                      not the event's topic\n"
         "  --confirm-timeout INTERVAL\n"
         "                      a confirm that takes longer means the broker is gone:\n"
         "                      reconnect and publish again (default '30 seconds')\n"
         "  --shutdown-timeout INTERVAL\n"
         "                      on SIGTERM, how long confirms are waited for before the\n"
         "                      unconfirmed jobs are given back (default '10 seconds')\n"
         "  --metrics-listen HOST:PORT\n"
         "                      serve Prometheus counters at http://HOST:PORT/metrics\n"
         "  --stats-interval INTERVAL\n"
         "                      log a line of counters this often (default '1 minute';\n"
         "                      0: never)\n"
         "  --max-jobs N        exit after N jobs were forwarded (or failed)\n"
         "  --declare           create the exchange (RabbitMQ: a durable topic exchange,\n"
         "                      no arguments) or the JetStream stream (NATS: subjects\n"
         "                      PREFIX> of --subject-prefix, file storage, limits\n"
         "                      retention, the server's other defaults) when missing;\n"
         "                      one that exists is used if it fits, else an error\n"
         "  --nats-stream NAME  with --declare: the stream's name (default: the subject\n"
         "                      prefix without its last '.', other dots as '_')\n"
         "  --async-commit      claims and completions (--stream: next_batch and\n"
         "                      finish_batch) commit with synchronous_commit = off:\n"
         "                      faster; a PostgreSQL crash may then lose the last\n"
         "                      completions, and their jobs are published again\n"
         "                      (a duplicate, never a loss)\n"
         "  -v, --verbose       log every message to stderr\n"
         "  -h, --help          this text\n"
         "\n"
         "SIGTERM or SIGINT: stop claiming, wait for the confirms (--shutdown-timeout),\n"
         "complete the confirmed jobs, give back the rest, exit 0.\n"
         "\n"
         "Exit status: 0 normal end, 1 connection, server or other error, 2 usage error.\n";
}

namespace {

// --declare and --nats-stream: what can be declared; fills in the stream's
// default name. An error message, or "".
std::string CheckDeclare(RelayOptions& options) {
  const bool nats = options.broker.kind == BrokerAddress::Kind::kNats;
  if (!options.nats_stream.empty() && !(nats && options.declare)) {
    return "--nats-stream is for --declare with a nats:// broker";
  }
  if (!options.declare) return "";
  if (!nats) {
    if (options.exchange.empty()) {
      return "--declare needs an --exchange: RabbitMQ's default exchange cannot be declared";
    }
    return "";
  }
  const std::string& prefix = options.subject_prefix;
  if (prefix.size() < 2 || prefix.back() != '.') {
    return "--declare with NATS needs a --subject-prefix ending in '.' (the stream takes the "
           "subjects PREFIX>)";
  }
  if (options.nats_stream.empty()) {
    options.nats_stream = prefix.substr(0, prefix.size() - 1);
    std::replace(options.nats_stream.begin(), options.nats_stream.end(), '.', '_');
  }
  if (options.nats_stream.find_first_of(".*> \t") != std::string::npos) {
    return "--nats-stream '" + options.nats_stream +
           "' is not a JetStream stream name (no '.', '*', '>' or space)";
  }
  return "";
}

}  // namespace

RelayParseResult ParseRelayOptions(const std::vector<std::string>& args, const char* broker_env,
                                   const char* park_env, const BrokerTlsEnvironment& tls_env) {
  RelayParseResult result;
  RelayOptions& options = result.options;
  std::string broker_url = broker_env != nullptr ? broker_env : "";
  if (tls_env.ca != nullptr) options.tls.ca = tls_env.ca;
  if (tls_env.cert != nullptr) options.tls.cert = tls_env.cert;
  if (tls_env.key != nullptr) options.tls.key = tls_env.key;
  if (tls_env.insecure != nullptr && *tls_env.insecure != '\0') {
    const std::string insecure = tls_env.insecure;
    if (insecure != "0" && insecure != "1")
      return Error("PGQ_RELAY_BROKER_INSECURE must be 0 or 1");
    options.tls.insecure = insecure == "1";
  }
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "-h" || arg == "--help") {
      result.status = RelayParseStatus::kHelp;
      return result;
    }
    if (arg == "-v" || arg == "--verbose") {
      options.verbose = true;
      continue;
    }
    if (arg == "--broker-insecure") {
      options.tls.insecure = true;
      continue;
    }
    if (arg == "--async-commit") {
      options.async_commit = true;
      continue;
    }
    if (arg == "--declare") {
      options.declare = true;
      continue;
    }
    // --name VALUE or --name=VALUE
    std::string name = arg;
    std::string value;
    const std::size_t equals = arg.find('=');
    if (equals != std::string::npos) {
      name = arg.substr(0, equals);
      value = arg.substr(equals + 1);
    }
    // The text options, each where it goes; those that may not be empty.
    const struct {
      const char* name;
      std::string* target;
      bool may_be_empty;
    } texts[] = {
        {"--broker", &broker_url, false},
        {"--dsn", &options.dsn, true},
        {"--queue", &options.queue, false},
        {"--stream", &options.stream, false},
        {"--consumer", &options.consumer, false},
        {"--lease", &options.lease, false},
        {"--wait", &options.wait, false},
        {"--exchange", &options.exchange, true},  // "": RabbitMQ's default exchange
        {"--subject-prefix", &options.subject_prefix, true},
        {"--routing-key-field", &options.routing_key_field, false},
        {"--confirm-timeout", &options.confirm_timeout, false},
        {"--shutdown-timeout", &options.shutdown_timeout, false},
        {"--metrics-listen", &options.metrics_listen, false},
        {"--stats-interval", &options.stats_interval, false},
        {"--broker-ca", &options.tls.ca, false},
        {"--broker-cert", &options.tls.cert, false},
        {"--broker-key", &options.tls.key, false},
        {"--nats-stream", &options.nats_stream, false},
    };
    const auto text = std::find_if(std::begin(texts), std::end(texts),
                                   [&](const auto& option) { return name == option.name; });
    if (text == std::end(texts) && name != "--concurrency" && name != "--max-jobs") {
      return Error(arg.rfind("-", 0) == 0 ? "unknown option " + name
                                          : "unexpected argument '" + arg + "'");
    }
    if (equals == std::string::npos) {
      if (i + 1 >= args.size()) return Error(name + " needs a value");
      value = args[++i];
    }
    long number = 0;
    if (text != std::end(texts)) {
      if (value.empty() && !text->may_be_empty) return Error(name + " must not be empty");
      *text->target = value;
      if (name == "--queue") options.queue_given = true;
    } else if (name == "--concurrency") {
      if (!ParseNumber(value, 1, kMaxRelayConcurrency, &number)) {
        return Error("--concurrency must be a number from 1 to " +
                     std::to_string(kMaxRelayConcurrency));
      }
      options.concurrency = static_cast<int>(number);
    } else {  // --max-jobs
      if (!ParseNumber(value, 1, 1000000000L, &number)) {
        return Error("--max-jobs must be a positive number");
      }
      options.max_jobs = number;
    }
  }
  if (broker_url.empty()) return Error("--broker is required (or PGQ_RELAY_BROKER)");
  std::string error;
  // Several URLs, comma-separated: the nodes of one cluster, tried in turn
  // (a comma in a password is written %2C).
  for (std::size_t start = 0; start <= broker_url.size();) {
    std::size_t comma = broker_url.find(',', start);
    if (comma == std::string::npos) comma = broker_url.size();
    BrokerAddress address;
    if (!ParseBrokerUrl(broker_url.substr(start, comma - start), &address, &error)) {
      return Error(error);
    }
    if (!options.brokers.empty() && address.kind != options.brokers.front().kind) {
      return Error("--broker: the URLs of one relay are all amqp:// or all nats://");
    }
    options.brokers.push_back(std::move(address));
    start = comma + 1;
  }
  options.broker = options.brokers.front();
  if (const std::string tls_error = CheckTls(options); !tls_error.empty()) return Error(tls_error);
  if (!options.stream.empty()) {
    if (options.queue_given) return Error("--queue and --stream exclude each other");
    if (!options.lease.empty())
      return Error("--lease is for a queue: a stream's batch is its lease");
    if (!options.metrics_listen.empty()) {
      return Error("--metrics-listen is not available with --stream (use pgq.metrics())");
    }
  }
  const bool parks = park_env != nullptr && *park_env != '\0';
  if (parks && !options.stream.empty()) {
    return Error("PGQ_RELAY_DEBUG_PARK is for a queue, not --stream");
  }
  if (!options.metrics_listen.empty()) {
    std::string host;
    int port = 0;
    if (!ParseListenAddress(options.metrics_listen, &host, &port)) {
      return Error("--metrics-listen must be HOST:PORT");
    }
  }
  if (const std::string declare = CheckDeclare(options); !declare.empty()) return Error(declare);
  if (park_env != nullptr && *park_env != '\0' && !ParsePark(park_env, &options.park)) {
    return Error("PGQ_RELAY_DEBUG_PARK must be after-publish:N or after-confirm:N");
  }
  result.status = RelayParseStatus::kRun;
  return result;
}

}  // namespace pgq::cli
