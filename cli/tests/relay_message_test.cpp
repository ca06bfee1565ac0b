#include "relay_message.h"

#include <gtest/gtest.h>

namespace pgq::cli {
namespace {

RelayOptions Amqp() {
  RelayOptions options;
  options.broker.kind = BrokerAddress::Kind::kAmqp;
  return options;
}

RelayOptions Nats(std::string prefix = "") {
  RelayOptions options;
  options.broker.kind = BrokerAddress::Kind::kNats;
  options.subject_prefix = std::move(prefix);
  return options;
}

ClaimedEvent Event() {
  ClaimedEvent event;
  event.id = "42";
  event.attempt = "2";
  event.queue = "to_broker";
  event.body = R"({"order": 7})";
  event.topic = "orders.created";
  event.group_key = "customer-9";
  event.event_id = "1001";
  event.enqueued_at = "2026-12-04T10:00:00.000001Z";
  return event;
}

std::string Header(const Message& message, const std::string& name) {
  for (const auto& [key, value] : message.headers) {
    if (key == name) return value;
  }
  return "(absent)";
}

TEST(RelayMessage, AnEventsMessage) {
  std::string error;
  const std::optional<Message> message = MakeMessage(Event(), Amqp(), &error);
  ASSERT_TRUE(message) << error;
  EXPECT_EQ(message->message_id, "pgq-to_broker-42");
  EXPECT_EQ(message->routing_key, "orders.created");
  EXPECT_EQ(message->body, R"({"order": 7})");
  EXPECT_EQ(Header(*message, "pgq-queue"), "to_broker");
  EXPECT_EQ(Header(*message, "pgq-job-id"), "42");
  EXPECT_EQ(Header(*message, "pgq-attempt"), "2");
  EXPECT_EQ(Header(*message, "pgq-group-key"), "customer-9");
  EXPECT_EQ(Header(*message, "pgq-enqueued-at"), "2026-12-04T10:00:00.000001Z");
  EXPECT_EQ(Header(*message, "pgq-event-id"), "1001");
  EXPECT_EQ(Header(*message, "pgq-topic"), "orders.created");
}

TEST(RelayMessage, TheMessageIdDoesNotChangeWithTheAttempt) {
  ClaimedEvent first = Event();
  first.attempt = "1";
  std::string error;
  EXPECT_EQ(MakeMessage(first, Amqp(), &error)->message_id,
            MakeMessage(Event(), Amqp(), &error)->message_id);
}

TEST(RelayMessage, APlainJobGoesWholeUnderItsQueuesName) {
  ClaimedEvent event = Event();
  event.topic.reset();
  event.group_key.reset();
  event.event_id.reset();
  std::string error;
  const std::optional<Message> message = MakeMessage(event, Amqp(), &error);
  ASSERT_TRUE(message) << error;
  EXPECT_EQ(message->routing_key, "to_broker");
  EXPECT_EQ(Header(*message, "pgq-group-key"), "(absent)");
  EXPECT_EQ(Header(*message, "pgq-topic"), "(absent)");
}

TEST(RelayMessage, RoutingKeyFromAField) {
  RelayOptions options = Amqp();
  options.routing_key_field = "kind";
  ClaimedEvent event = Event();
  event.routing_value = "invoice.paid";
  std::string error;
  EXPECT_EQ(MakeMessage(event, options, &error)->routing_key, "invoice.paid");
  event.routing_value.reset();
  EXPECT_FALSE(MakeMessage(event, options, &error));
  EXPECT_EQ(error, "its payload has no field \"kind\" for the routing key (--routing-key-field)");
}

TEST(RelayMessage, NatsSubjects) {
  std::string error;
  EXPECT_EQ(MakeMessage(Event(), Nats("app."), &error)->routing_key, "app.orders.created");
  ClaimedEvent event = Event();
  for (const char* bad : {"orders..created", "orders.", "orders.*", "orders.>", "has space"}) {
    event.topic = bad;
    EXPECT_FALSE(MakeMessage(event, Nats(), &error)) << bad;
    EXPECT_NE(error.find("which NATS refuses"), std::string::npos) << error;
  }
  event = Event();
  event.group_key = "line\nbreak";
  EXPECT_FALSE(MakeMessage(event, Nats(), &error));
  EXPECT_EQ(error, "its header pgq-group-key has a line break, which NATS headers cannot carry");
  // AMQP headers are binary-safe.
  EXPECT_TRUE(MakeMessage(event, Amqp(), &error));
}

TEST(RelayMessage, TraceContextHeadersOnlyWhenTraced) {
  const std::string traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
  for (const RelayOptions& options : {Amqp(), Nats()}) {
    for (const bool from_stream : {false, true}) {
      ClaimedEvent event = Event();
      event.from_stream = from_stream;
      std::string error;
      // Untraced: neither header.
      std::optional<Message> message = MakeMessage(event, options, &error);
      ASSERT_TRUE(message) << error;
      EXPECT_EQ(Header(*message, "traceparent"), "(absent)");
      EXPECT_EQ(Header(*message, "tracestate"), "(absent)");
      // Traced: both as stored, beside the pgq-* headers.
      event.traceparent = traceparent;
      event.tracestate = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7";
      message = MakeMessage(event, options, &error);
      ASSERT_TRUE(message) << error;
      EXPECT_EQ(Header(*message, "traceparent"), traceparent);
      EXPECT_EQ(Header(*message, "tracestate"), "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7");
      EXPECT_EQ(Header(*message, from_stream ? "pgq-stream" : "pgq-queue"), "to_broker");
      // A traceparent without a tracestate: only that header.
      event.tracestate.reset();
      message = MakeMessage(event, options, &error);
      ASSERT_TRUE(message) << error;
      EXPECT_EQ(Header(*message, "traceparent"), traceparent);
      EXPECT_EQ(Header(*message, "tracestate"), "(absent)");
    }
  }
}

TEST(RelayMessage, AmqpRoutingKeysAreAtMost255Bytes) {
  ClaimedEvent event = Event();
  event.topic = std::string(255, 'k');
  std::string error;
  EXPECT_TRUE(MakeMessage(event, Amqp(), &error));
  event.topic = std::string(256, 'k');
  EXPECT_FALSE(MakeMessage(event, Amqp(), &error));
  EXPECT_EQ(error, "its routing key is 256 bytes, more than AMQP's 255");
}

}  // namespace
}  // namespace pgq::cli
