#include "relay_options.h"

#include <gtest/gtest.h>

namespace pgq::cli {
namespace {

RelayParseResult Parse(std::vector<std::string> args, const char* broker_env = nullptr,
                       const char* park_env = nullptr) {
  return ParseRelayOptions(args, broker_env, park_env);
}

TEST(RelayOptions, Defaults) {
  const RelayParseResult r = Parse({"--broker", "amqp://127.0.0.1/"});
  ASSERT_EQ(r.status, RelayParseStatus::kRun) << r.error;
  EXPECT_EQ(r.options.queue, "to_broker");
  EXPECT_EQ(r.options.concurrency, 16);
  EXPECT_EQ(r.options.exchange, "pgq");
  EXPECT_EQ(r.options.wait, "30 seconds");
  EXPECT_EQ(r.options.confirm_timeout, "30 seconds");
  EXPECT_TRUE(r.options.lease.empty());
  EXPECT_TRUE(r.options.routing_key_field.empty());
  EXPECT_EQ(r.options.park.point, DebugPark::Point::kNone);
  EXPECT_EQ(r.options.broker.kind, BrokerAddress::Kind::kAmqp);
  EXPECT_EQ(r.options.broker.host, "127.0.0.1");
  EXPECT_EQ(r.options.broker.port, 5672);
  EXPECT_EQ(r.options.broker.user, "guest");
  EXPECT_EQ(r.options.broker.password, "guest");
  EXPECT_EQ(r.options.broker.vhost, "/");
}

TEST(RelayOptions, EveryOptionBothForms) {
  const RelayParseResult r = Parse({"--broker=nats://10.0.0.5:4333",
                                    "--dsn",
                                    "dbname=x",
                                    "--queue=events",
                                    "--concurrency",
                                    "4",
                                    "--lease=10s",
                                    "--wait",
                                    "5s",
                                    "--exchange=",
                                    "--subject-prefix",
                                    "app.",
                                    "--routing-key-field=kind",
                                    "--confirm-timeout",
                                    "3s",
                                    "--shutdown-timeout=1s",
                                    "--metrics-listen",
                                    "127.0.0.1:9187",
                                    "--stats-interval=0",
                                    "--max-jobs",
                                    "7",
                                    "-v"});
  ASSERT_EQ(r.status, RelayParseStatus::kRun) << r.error;
  EXPECT_EQ(r.options.broker.kind, BrokerAddress::Kind::kNats);
  EXPECT_EQ(r.options.broker.host, "10.0.0.5");
  EXPECT_EQ(r.options.broker.port, 4333);
  EXPECT_EQ(r.options.dsn, "dbname=x");
  EXPECT_EQ(r.options.queue, "events");
  EXPECT_EQ(r.options.concurrency, 4);
  EXPECT_EQ(r.options.lease, "10s");
  EXPECT_EQ(r.options.wait, "5s");
  EXPECT_EQ(r.options.exchange, "");
  EXPECT_EQ(r.options.subject_prefix, "app.");
  EXPECT_EQ(r.options.routing_key_field, "kind");
  EXPECT_EQ(r.options.confirm_timeout, "3s");
  EXPECT_EQ(r.options.shutdown_timeout, "1s");
  EXPECT_EQ(r.options.metrics_listen, "127.0.0.1:9187");
  EXPECT_EQ(r.options.stats_interval, "0");
  EXPECT_EQ(r.options.max_jobs, 7);
  EXPECT_TRUE(r.options.verbose);
}

TEST(RelayOptions, AsyncCommitIsOffUnlessAsked) {
  RelayParseResult r = Parse({"--broker", "nats://localhost:4222"}, nullptr);
  ASSERT_EQ(r.status, RelayParseStatus::kRun) << r.error;
  EXPECT_FALSE(r.options.async_commit);
  r = Parse({"--broker", "nats://localhost:4222", "--async-commit", "--stream", "s"}, nullptr);
  ASSERT_EQ(r.status, RelayParseStatus::kRun) << r.error;
  EXPECT_TRUE(r.options.async_commit);
}

TEST(RelayOptions, DeclareNamesTheStreamAfterThePrefix) {
  RelayParseResult r =
      Parse({"--broker", "nats://n:4222", "--declare", "--subject-prefix", "app.orders."});
  ASSERT_EQ(r.status, RelayParseStatus::kRun) << r.error;
  EXPECT_TRUE(r.options.declare);
  EXPECT_EQ(r.options.nats_stream, "app_orders");
  r = Parse({"--broker", "nats://n:4222", "--declare", "--subject-prefix", "a.", "--nats-stream",
             "ORDERS"});
  ASSERT_EQ(r.status, RelayParseStatus::kRun) << r.error;
  EXPECT_EQ(r.options.nats_stream, "ORDERS");
  r = Parse({"--broker", "amqp://u:p@h/", "--declare", "--exchange", "events"});
  ASSERT_EQ(r.status, RelayParseStatus::kRun) << r.error;
  EXPECT_TRUE(r.options.declare);
}

TEST(RelayOptions, DeclareErrors) {
  const struct {
    std::vector<std::string> args;
    const char* error;
  } cases[] = {
      {{"--broker", "nats://n:4222", "--declare"}, "--declare with NATS needs a --subject-prefix"},
      {{"--broker", "nats://n:4222", "--declare", "--subject-prefix", "app"}, "ending in '.'"},
      {{"--broker", "nats://n:4222", "--declare", "--subject-prefix", "a.", "--nats-stream", "a.b"},
       "is not a JetStream stream name"},
      {{"--broker", "nats://n:4222", "--nats-stream", "S"}, "--nats-stream is for --declare"},
      {{"--broker", "amqp://u:p@h/", "--declare", "--nats-stream", "S"},
       "--nats-stream is for --declare"},
      {{"--broker", "amqp://u:p@h/", "--declare", "--exchange", ""},
       "RabbitMQ's default exchange cannot be declared"},
  };
  for (const auto& c : cases) {
    const RelayParseResult r = Parse(c.args);
    EXPECT_EQ(r.status, RelayParseStatus::kUsageError) << c.error;
    EXPECT_NE(r.error.find(c.error), std::string::npos) << r.error;
  }
}

TEST(RelayOptions, BrokerFromTheEnvironmentUnlessGiven) {
  RelayParseResult r = Parse({}, "amqp://app:s3cret@mq.internal:5673/prod");
  ASSERT_EQ(r.status, RelayParseStatus::kRun) << r.error;
  EXPECT_EQ(r.options.broker.user, "app");
  EXPECT_EQ(r.options.broker.password, "s3cret");
  EXPECT_EQ(r.options.broker.host, "mq.internal");
  EXPECT_EQ(r.options.broker.port, 5673);
  EXPECT_EQ(r.options.broker.vhost, "prod");
  r = Parse({"--broker", "nats://127.0.0.1"}, "amqp://elsewhere/");
  ASSERT_EQ(r.status, RelayParseStatus::kRun) << r.error;
  EXPECT_EQ(r.options.broker.kind, BrokerAddress::Kind::kNats);
  EXPECT_EQ(r.options.broker.port, 4222);
}

TEST(RelayOptions, SeveralBrokersOfOneKind) {
  RelayParseResult r = Parse({"--broker", "amqp://a:5672/,amqp://b:5673/,amqp://u:p%2Cq@c/"});
  ASSERT_EQ(r.status, RelayParseStatus::kRun) << r.error;
  ASSERT_EQ(r.options.brokers.size(), 3u);
  EXPECT_EQ(r.options.broker.host, "a");
  EXPECT_EQ(r.options.brokers[1].port, 5673);
  EXPECT_EQ(r.options.brokers[2].password, "p,q");
  r = Parse({"--broker", "nats://a:4222,nats://b:4223"});
  ASSERT_EQ(r.status, RelayParseStatus::kRun) << r.error;
  EXPECT_EQ(r.options.brokers[1].url, "nats://b:4223");
  r = Parse({"--broker", "amqp://a/,nats://b"});
  EXPECT_EQ(r.status, RelayParseStatus::kUsageError);
  EXPECT_EQ(r.error, "--broker: the URLs of one relay are all amqp:// or all nats://");
  r = Parse({"--broker", "amqp://a/,"});
  EXPECT_EQ(r.status, RelayParseStatus::kUsageError);
}

TEST(RelayOptions, UrlEscapesAndIpv6) {
  BrokerAddress address;
  std::string error;
  ASSERT_TRUE(ParseBrokerUrl("amqp://us%40er:p%3Ass@[::1]:5674/%2f", &address, &error)) << error;
  EXPECT_EQ(address.user, "us@er");
  EXPECT_EQ(address.password, "p:ss");
  EXPECT_EQ(address.host, "::1");
  EXPECT_EQ(address.port, 5674);
  EXPECT_EQ(address.vhost, "/");
}

TEST(RelayOptions, BadInputIsAUsageError) {
  const struct {
    std::vector<std::string> args;
    const char* error;
  } cases[] = {
      {{}, "--broker is required (or PGQ_RELAY_BROKER)"},
      {{"--broker", "http://x"},
       "--broker must be an amqp:// or nats:// URL (amqps:// or tls:// for TLS)"},
      {{"--broker", "amqp://:5672/"}, "--broker: no host, or a bad port, in the amqp:// URL"},
      {{"--broker", "amqp://h:99999/"}, "--broker: no host, or a bad port, in the amqp:// URL"},
      {{"--broker", "amqp://h:/"}, "--broker: no host, or a bad port, in the amqp:// URL"},
      {{"--broker", "amqp://u%zz@h/"}, "--broker: a broken %-escape in the user or password"},
      {{"--broker", "nats://h:1/x"}, "--broker: a nats:// URL has no path"},
      {{"--broker", "amqp://h/", "--concurrency", "0"},
       "--concurrency must be a number from 1 to 1000"},
      {{"--broker", "amqp://h/", "--concurrency", "1001"},
       "--concurrency must be a number from 1 to 1000"},
      {{"--broker", "amqp://h/", "--max-jobs", "-1"}, "--max-jobs must be a positive number"},
      {{"--broker", "amqp://h/", "--queue", ""}, "--queue must not be empty"},
      {{"--broker", "amqp://h/", "--lease"}, "--lease needs a value"},
      {{"--broker", "amqp://h/", "--metrics-listen", "9187"}, "--metrics-listen must be HOST:PORT"},
      {{"--broker", "amqp://h/", "--frobnicate"}, "unknown option --frobnicate"},
      {{"--broker", "amqp://h/", "extra"}, "unexpected argument 'extra'"},
  };
  for (const auto& c : cases) {
    const RelayParseResult r = Parse(c.args);
    EXPECT_EQ(r.status, RelayParseStatus::kUsageError) << c.error;
    EXPECT_EQ(r.error, c.error);
  }
}

TEST(RelayOptions, DebugPark) {
  RelayParseResult r = Parse({"--broker", "amqp://h/"}, nullptr, "after-publish:3");
  ASSERT_EQ(r.status, RelayParseStatus::kRun) << r.error;
  EXPECT_EQ(r.options.park.point, DebugPark::Point::kAfterPublish);
  EXPECT_EQ(r.options.park.nth, 3);
  r = Parse({"--broker", "amqp://h/"}, nullptr, "after-confirm:1");
  EXPECT_EQ(r.options.park.point, DebugPark::Point::kAfterConfirm);
  r = Parse({"--broker", "amqp://h/"}, nullptr, "after-lunch:1");
  EXPECT_EQ(r.status, RelayParseStatus::kUsageError);
  r = Parse({"--broker", "amqp://h/"}, nullptr, "after-confirm:0");
  EXPECT_EQ(r.status, RelayParseStatus::kUsageError);
  r = Parse({"--broker", "amqp://h/"}, nullptr, "");
  EXPECT_EQ(r.options.park.point, DebugPark::Point::kNone);
}

TEST(RelayOptions, Help) {
  EXPECT_EQ(Parse({"--broker", "amqp://h/", "--help"}).status, RelayParseStatus::kHelp);
  EXPECT_NE(RelayUsageText().find("--routing-key-field"), std::string::npos);
}

}  // namespace
}  // namespace pgq::cli
