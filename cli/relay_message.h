// What pgq-relay sends for a job: the message id, routing key, body and
// headers, from the columns of its claim (claim SQL in relay.cpp unwraps
// pgq.publish's envelope on the server). Pure C++: unit-tested in cli/tests.
// A traced job's or event's W3C trace context goes as the headers
// `traceparent` and `tracestate`, as stored: the relay records no span of
// its own, so the consumer's span is a child of the producer's.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "relay_options.h"

namespace pgq::cli {

// A claimed job as the relay's claim returns it. The optional fields are
// NULL for a job that pgq.publish did not make (or, for group_key, an event
// published without one).
struct ClaimedEvent {
  // An event of a stream (pgq-relay --stream): `queue` is the stream's name,
  // `id` its event id, `enqueued_at` when it was appended, no attempt.
  bool from_stream = false;
  std::string id;
  std::string attempt;
  std::string queue;
  std::string body;  // the event's payload (or the job's whole payload), JSON text
  std::optional<std::string> topic;
  std::optional<std::string> group_key;
  std::optional<std::string> event_id;
  std::string enqueued_at;  // ISO 8601, UTC
  // --routing-key-field's value, when asked for and the body is an object
  // with that field (as text: a string's contents, or other JSON's text).
  std::optional<std::string> routing_value;
  // Its W3C trace context (pgq.claim_traced, pgq.next_batch_traced), none
  // when it has none. The server keeps only checked contexts: lowercase hex,
  // no control characters.
  std::optional<std::string> traceparent;
  std::optional<std::string> tracestate;
};

struct Message {
  std::string message_id;   // pgq-QUEUE-JOBID: the same for every attempt
  std::string routing_key;  // NATS: the whole subject
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

// The message for a job, or nullopt with *error saying why it cannot be one
// (no routing key, a routing key the broker refuses): the relay then fails
// the job with that text instead of sending it.
std::optional<Message> MakeMessage(const ClaimedEvent& event, const RelayOptions& options,
                                   std::string* error);

// pgq-QUEUE-JOBID.
std::string MessageId(const std::string& queue, const std::string& job_id);

}  // namespace pgq::cli
