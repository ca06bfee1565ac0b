#include "relay_message.h"

#include <algorithm>

namespace pgq::cli {

namespace {

// AMQP 0-9-1 carries a routing key as a short string.
constexpr std::size_t kMaxAmqpRoutingKey = 255;

// A subject JetStream takes for a publish: tokens separated by dots, none
// empty, no whitespace or control characters, no wildcards.
bool IsNatsSubject(const std::string& subject, std::string* why) {
  if (subject.empty()) {
    *why = "is empty";
    return false;
  }
  std::size_t token_start = 0;
  for (std::size_t i = 0; i <= subject.size(); ++i) {
    if (i == subject.size() || subject[i] == '.') {
      if (i == token_start) {
        *why = "has an empty token (a leading, trailing or double dot)";
        return false;
      }
      const std::string token = subject.substr(token_start, i - token_start);
      if (token == "*" || token == ">") {
        *why = "has a wildcard token";
        return false;
      }
      token_start = i + 1;
      continue;
    }
    const unsigned char c = static_cast<unsigned char>(subject[i]);
    if (c <= ' ' || c == 0x7f) {
      *why = "has whitespace or a control character";
      return false;
    }
  }
  return true;
}

bool HasLineBreak(const std::string& text) {
  return text.find_first_of("\r\n") != std::string::npos;
}

}  // namespace

std::string MessageId(const std::string& queue, const std::string& job_id) {
  return "pgq-" + queue + "-" + job_id;
}

std::optional<Message> MakeMessage(const ClaimedEvent& event, const RelayOptions& options,
                                   std::string* error) {
  Message message;
  message.message_id =
      event.from_stream ? "pgqs-" + event.queue + "-" + event.id : MessageId(event.queue, event.id);
  message.body = event.body;
  // The routing key: the payload's field when asked, else the event's topic,
  // else (a job that pgq.publish did not make) the queue's name.
  std::string key;
  if (!options.routing_key_field.empty()) {
    if (!event.routing_value) {
      *error = "its payload has no field \"" + options.routing_key_field +
               "\" for the routing key (--routing-key-field)";
      return std::nullopt;
    }
    key = *event.routing_value;
  } else {
    key = event.topic.value_or(event.queue);
  }
  const bool nats = options.broker.kind == BrokerAddress::Kind::kNats;
  if (nats) {
    message.routing_key = options.subject_prefix + key;
    std::string why;
    if (!IsNatsSubject(message.routing_key, &why)) {
      *error = "its subject \"" + message.routing_key + "\" " + why + ", which NATS refuses";
      return std::nullopt;
    }
  } else {
    if (key.size() > kMaxAmqpRoutingKey) {
      *error = "its routing key is " + std::to_string(key.size()) + " bytes, more than AMQP's 255";
      return std::nullopt;
    }
    message.routing_key = key;
  }
  auto add = [&](const char* name, const std::optional<std::string>& value) {
    if (value) message.headers.emplace_back(name, *value);
  };
  if (event.from_stream) {
    add("pgq-stream", event.queue);
    add("pgq-stream-event-id", event.id);
    add("pgq-appended-at", event.enqueued_at);
  } else {
    add("pgq-queue", event.queue);
    add("pgq-job-id", event.id);
    add("pgq-attempt", event.attempt);
    add("pgq-enqueued-at", event.enqueued_at);
  }
  add("pgq-group-key", event.group_key);
  add("pgq-event-id", event.event_id);
  add("pgq-topic", event.topic);
  add("traceparent", event.traceparent);
  add("tracestate", event.tracestate);
  if (nats) {
    // A NATS header is one line of the protocol.
    const auto broken =
        std::find_if(message.headers.begin(), message.headers.end(),
                     [](const auto& header) { return HasLineBreak(header.second); });
    if (broken != message.headers.end()) {
      *error = "its header " + broken->first + " has a line break, which NATS headers cannot carry";
      return std::nullopt;
    }
  }
  return message;
}

}  // namespace pgq::cli
