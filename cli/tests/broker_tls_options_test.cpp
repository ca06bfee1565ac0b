// pgq-relay's TLS options (issue 31): amqps:// and tls:// URLs, --broker-ca,
// --broker-cert, --broker-key, --broker-insecure and their environment.
#include <gtest/gtest.h>

#include "relay_options.h"

namespace pgq::cli {
namespace {

RelayParseResult Parse(std::vector<std::string> args, const BrokerTlsEnvironment& env = {}) {
  return ParseRelayOptions(args, nullptr, nullptr, env);
}

TEST(BrokerTlsOptions, AmqpsDefaultsToPort5671) {
  const RelayParseResult r = Parse({"--broker", "amqps://u:p@rabbit.example/vh"});
  ASSERT_EQ(r.status, RelayParseStatus::kRun) << r.error;
  EXPECT_EQ(r.options.broker.kind, BrokerAddress::Kind::kAmqp);
  EXPECT_TRUE(r.options.broker.tls);
  EXPECT_EQ(r.options.broker.host, "rabbit.example");
  EXPECT_EQ(r.options.broker.port, 5671);
  EXPECT_EQ(r.options.broker.user, "u");
  EXPECT_EQ(r.options.broker.vhost, "vh");
  // Checked by default: no CA given means the system's, not "none".
  EXPECT_TRUE(r.options.tls.ca.empty());
  EXPECT_FALSE(r.options.tls.insecure);
}

TEST(BrokerTlsOptions, TlsIsNatsOverTls) {
  const RelayParseResult r = Parse({"--broker", "tls://nats.example:4443,tls://nats2.example"});
  ASSERT_EQ(r.status, RelayParseStatus::kRun) << r.error;
  EXPECT_EQ(r.options.broker.kind, BrokerAddress::Kind::kNats);
  EXPECT_TRUE(r.options.broker.tls);
  EXPECT_EQ(r.options.broker.port, 4443);
  EXPECT_EQ(r.options.brokers[1].port, 4222);
  EXPECT_EQ(r.options.brokers[1].url, "tls://nats2.example");
}

TEST(BrokerTlsOptions, PlainUrlsAreNotTls) {
  EXPECT_FALSE(Parse({"--broker", "amqp://h/"}).options.broker.tls);
  EXPECT_FALSE(Parse({"--broker", "nats://h"}).options.broker.tls);
}

TEST(BrokerTlsOptions, FilesFromOptionsAndEnvironment) {
  RelayParseResult r = Parse({"--broker", "amqps://h/", "--broker-ca", "/c/ca.pem", "--broker-cert",
                              "/c/me.pem", "--broker-key=/c/me.key"});
  ASSERT_EQ(r.status, RelayParseStatus::kRun) << r.error;
  EXPECT_EQ(r.options.tls.ca, "/c/ca.pem");
  EXPECT_EQ(r.options.tls.cert, "/c/me.pem");
  EXPECT_EQ(r.options.tls.key, "/c/me.key");

  BrokerTlsEnvironment env;
  env.ca = "/e/ca.pem";
  env.cert = "/e/me.pem";
  env.key = "/e/me.key";
  r = Parse({"--broker", "tls://h"}, env);
  ASSERT_EQ(r.status, RelayParseStatus::kRun) << r.error;
  EXPECT_EQ(r.options.tls.ca, "/e/ca.pem");
  EXPECT_EQ(r.options.tls.cert, "/e/me.pem");
  EXPECT_EQ(r.options.tls.key, "/e/me.key");
  // The command line wins over the environment.
  r = Parse({"--broker", "tls://h", "--broker-ca", "/c/ca.pem"}, env);
  ASSERT_EQ(r.status, RelayParseStatus::kRun) << r.error;
  EXPECT_EQ(r.options.tls.ca, "/c/ca.pem");

  BrokerTlsEnvironment insecure;
  insecure.insecure = "1";
  r = Parse({"--broker", "tls://h"}, insecure);
  ASSERT_EQ(r.status, RelayParseStatus::kRun) << r.error;
  EXPECT_TRUE(r.options.tls.insecure);
  insecure.insecure = "0";
  EXPECT_FALSE(Parse({"--broker", "tls://h"}, insecure).options.tls.insecure);
  r = Parse({"--broker", "amqps://h/", "--broker-insecure"});
  ASSERT_EQ(r.status, RelayParseStatus::kRun) << r.error;
  EXPECT_TRUE(r.options.tls.insecure);
}

TEST(BrokerTlsOptions, BadCombinationsAreUsageErrors) {
  const struct {
    std::vector<std::string> args;
    const char* error;
  } cases[] = {
      {{"--broker", "amqp://h/", "--broker-ca", "ca.pem"},
       "--broker-ca, --broker-cert, --broker-key and --broker-insecure are for TLS: use an "
       "amqps:// or tls:// URL"},
      {{"--broker", "nats://h", "--broker-insecure"},
       "--broker-ca, --broker-cert, --broker-key and --broker-insecure are for TLS: use an "
       "amqps:// or tls:// URL"},
      {{"--broker", "amqps://h/", "--broker-cert", "me.pem"},
       "--broker-cert and --broker-key go together"},
      {{"--broker", "tls://h", "--broker-key", "me.key"},
       "--broker-cert and --broker-key go together"},
      {{"--broker", "tls://h", "--broker-insecure", "--broker-ca", "ca.pem"},
       "--broker-insecure and --broker-ca exclude each other (--broker-insecure checks no "
       "certificate)"},
      {{"--broker", "amqps://a/,amqp://b/"},
       "--broker: the URLs of one relay all use TLS (amqps://, tls://) or none does"},
      {{"--broker", "tls://a,nats://b"},
       "--broker: the URLs of one relay all use TLS (amqps://, tls://) or none does"},
      {{"--broker", "amqps://a/,tls://b"},
       "--broker: the URLs of one relay are all amqp:// or all nats://"},
      {{"--broker", "tls://h/x"}, "--broker: a tls:// URL has no path"},
      {{"--broker", "amqps://:1/"}, "--broker: no host, or a bad port, in the amqps:// URL"},
      {{"--broker", "amqps://h/", "--broker-ca", ""}, "--broker-ca must not be empty"},
      {{"--broker", "nats+tls://h"},
       "--broker must be an amqp:// or nats:// URL (amqps:// or tls:// for TLS)"},
  };
  for (const auto& c : cases) {
    const RelayParseResult r = Parse(c.args);
    EXPECT_EQ(r.status, RelayParseStatus::kUsageError) << c.error;
    EXPECT_EQ(r.error, c.error);
  }
  BrokerTlsEnvironment env;
  env.insecure = "yes";
  const RelayParseResult r = Parse({"--broker", "tls://h"}, env);
  EXPECT_EQ(r.status, RelayParseStatus::kUsageError);
  EXPECT_EQ(r.error, "PGQ_RELAY_BROKER_INSECURE must be 0 or 1");
}

}  // namespace
}  // namespace pgq::cli
