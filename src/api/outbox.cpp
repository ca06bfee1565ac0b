// The transactional outbox: pgq.subscribe, pgq.unsubscribe, pgq.publish.
//
// publish runs in the caller's transaction: it records the event and
// enqueues one job per subscribed queue, so the event and its jobs exist if
// and only if the business change committed. Each subscriber is a queue of
// its own, so each handler retries and dead-letters on its own and a retry
// never re-runs a handler that already succeeded.
//
// Rights (1.2, issue 15 M4; docs/security.md): subscribing takes the admin
// right on the queue and the subscribe right on the topic, publishing the
// publish right on the topic, and nothing on the subscribed queues: whoever
// subscribed decided that the topic's events go there. The fan-out (locks, event, jobs, streams) is
// a service (service/outbox.h); the rows are the store's (store/outbox.h).
#include "service/queue_ref.h"
#include "service/rights.h"
#include "service/stream_rights.h"
#include "api/topics.h"
#include "pg/trace_context.h"
#include "pg/args.h"
#include "store/outbox.h"
#include "service/outbox.h"
#include "store/streams.h"

namespace pgq::api {

namespace {

// subscribe's and unsubscribe's target: a queue or (2.0) a stream, exactly
// one of them.
struct Target {
  std::string_view queue;
  std::string_view stream;
};

Target TargetArgs(FunctionCallInfo fcinfo) {
  const bool has_queue = !pg::ArgIsNull(fcinfo, 1);
  const bool has_stream = !pg::ArgIsNull(fcinfo, 2);
  if (has_queue == has_stream) {
    pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE, "name a queue or a stream, not both or neither", {},
              "pgq.subscribe(topic, 'queue') or pgq.subscribe(topic, stream => 'stream').");
  }
  return has_queue ? Target{pg::QueueNameArg(fcinfo, 1), {}}
                   : Target{{}, pg::NameArg(fcinfo, 2, "stream")};
}

}  // namespace

}  // namespace pgq::api

using namespace pgq;

// subscribe(topic, queue, stream)
PGQ_FUNCTION(pgq_subscribe) {
  const std::string_view topic = pg::KeyArg(fcinfo, 0, "topic");
  const api::Target target = api::TargetArgs(fcinfo);
  pg::SpiSession spi;
  if (!target.stream.empty()) {
    const store::streams::Stream stream =
        service::FindStreamWithRight(spi, target.stream, core::kAdmin);
    api::RequireTopicRight(spi, topic, api::TopicRight::kSubscribe);
    store::SubscribeStream(spi, topic, stream.id);
    PG_RETURN_VOID();
  }
  const service::QueueRef ref = service::FindQueueWithRight(spi, target.queue, core::kAdmin);
  api::RequireTopicRight(spi, topic, api::TopicRight::kSubscribe);
  store::Subscribe(spi, topic, ref.id);
  PG_RETURN_VOID();
}

// unsubscribe(topic, queue, stream) returns whether the subscription existed
PGQ_FUNCTION(pgq_unsubscribe) {
  const std::string_view topic = pg::KeyArg(fcinfo, 0, "topic");
  const api::Target target = api::TargetArgs(fcinfo);
  pg::SpiSession spi;
  if (!target.stream.empty()) {
    const store::streams::Stream stream = service::FindStream(spi, target.stream);
    if (!api::OwnsTopic(spi, topic)) service::RequireStreamRight(spi, stream, core::kAdmin);
    PG_RETURN_BOOL(store::UnsubscribeStream(spi, topic, stream.id));
  }
  const std::string_view queue = target.queue;
  const service::QueueRef ref = service::FindQueue(spi, queue);  // unknown: an error, not false
  // The queue's admin, or the topic's owner (who may cut a subscriber off).
  if (!api::OwnsTopic(spi, topic)) {
    service::RequireRight(spi, ref.id, queue, core::kAdmin);
  }
  PG_RETURN_BOOL(store::Unsubscribe(spi, topic, queue));
}

// publish(topic, payload, dedupe_key, group_key, traceparent, tracestate)
// returns the event id
PGQ_FUNCTION(pgq_publish) {
  const std::string_view topic = pg::KeyArg(fcinfo, 0, "topic");
  const Datum payload = pg::RequiredPayload(fcinfo, 1);
  const bool has_dedupe = !pg::ArgIsNull(fcinfo, 2);
  if (has_dedupe) (void)pg::KeyArg(fcinfo, 2, "dedupe_key");
  // group_key, copied to every subscriber job (its FIFO group there).
  const bool has_group = !pg::ArgIsNull(fcinfo, 3);
  const std::string_view group =
      has_group ? pg::KeyArg(fcinfo, 3, "group_key") : std::string_view();
  const Datum trace_context = pg::TraceContextArg(fcinfo, 4);

  pg::SpiSession spi;
  api::RequireTopicRight(spi, topic, api::TopicRight::kPublish);
  const std::vector<store::Subscriber> queues = store::Subscribers(spi, topic);
  PG_RETURN_INT64(service::Publish(spi, topic, queues, payload, has_dedupe ? PG_GETARG_DATUM(2) : 0,
                                   has_group ? PG_GETARG_DATUM(3) : 0, group, trace_context));
}
