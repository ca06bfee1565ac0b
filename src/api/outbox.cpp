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
// subscribed decided that the topic's events go there. On a database still
// at 1.1 (no pgq.topics), 1.1's rule: publishing takes the produce right on
// every subscribed queue.
#include "api/queue_ref.h"
#include "api/rights.h"
#include "api/stream_rights.h"
#include "api/topics.h"
#include "pg/allocator.h"
#include "pg/args.h"
#include "pg/queue_lock.h"
#include "store/catalog.h"
#include "store/jobs.h"
#include "store/outbox.h"
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
  const bool has_stream = PG_NARGS() > 2 && !pg::ArgIsNull(fcinfo, 2);
  if (has_queue == has_stream) {
    pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE, "name a queue or a stream, not both or neither", {},
              "pgq.subscribe(topic, 'queue') or pgq.subscribe(topic, stream => 'stream').");
  }
  return has_queue ? Target{pg::QueueNameArg(fcinfo, 1), {}}
                   : Target{{}, pg::NameArg(fcinfo, 2, "stream")};
}

// Appends the published event to each subscribed stream (2.0).
void AppendToStreams(pg::SpiSession& spi, std::string_view topic, int64 event_id, Datum payload,
                     bool has_group, Datum group_key) {
  if (!store::InstalledCatalog().streams) return;
  const std::vector<std::string> streams = store::StreamSubscribers(spi, topic);
  if (streams.empty()) return;
  const Datum event =
      store::EventEnvelope(spi, event_id, topic, payload, has_group ? group_key : 0);
  for (const std::string& stream : streams) {
    int64 id = 0;
    (void)store::streams::Append(spi, stream, &event, 1, &id, /*missing_ok=*/true);
  }
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
    const store::streams::Stream stream = api::FindStream(spi, target.stream);
    api::RequireStreamRight(spi, stream, core::kAdmin);
    api::RequireTopicRight(spi, topic, api::TopicRight::kSubscribe);
    store::SubscribeStream(spi, topic, stream.id);
    PG_RETURN_VOID();
  }
  const api::QueueRef ref = api::FindQueue(spi, target.queue);
  api::RequireRight(spi, ref.id, target.queue, core::kAdmin);
  if (api::TopicsTableExists()) api::RequireTopicRight(spi, topic, api::TopicRight::kSubscribe);
  store::Subscribe(spi, topic, ref.id);
  PG_RETURN_VOID();
}

// unsubscribe(topic, queue, stream) returns whether the subscription existed
PGQ_FUNCTION(pgq_unsubscribe) {
  const std::string_view topic = pg::KeyArg(fcinfo, 0, "topic");
  const api::Target target = api::TargetArgs(fcinfo);
  pg::SpiSession spi;
  if (!target.stream.empty()) {
    const store::streams::Stream stream = api::FindStream(spi, target.stream);
    if (!api::OwnsTopic(spi, topic)) api::RequireStreamRight(spi, stream, core::kAdmin);
    PG_RETURN_BOOL(store::UnsubscribeStream(spi, topic, stream.id));
  }
  const std::string_view queue = target.queue;
  const api::QueueRef ref = api::FindQueue(spi, queue);  // unknown: an error, not false
  // The queue's admin, or the topic's owner (who may cut a subscriber off).
  if (!api::TopicsTableExists() || !api::OwnsTopic(spi, topic)) {
    api::RequireRight(spi, ref.id, queue, core::kAdmin);
  }
  PG_RETURN_BOOL(store::Unsubscribe(spi, topic, queue));
}

// publish(topic, payload, dedupe_key) returns the event id
PGQ_FUNCTION(pgq_publish) {
  const std::string_view topic = pg::KeyArg(fcinfo, 0, "topic");
  const Datum payload = pg::RequiredPayload(fcinfo, 1);
  const bool has_dedupe = !pg::ArgIsNull(fcinfo, 2);
  if (has_dedupe) (void)pg::KeyArg(fcinfo, 2, "dedupe_key");
  // 1.2: group_key, copied to every subscriber job (its FIFO group there).
  const bool has_group = PG_NARGS() > 3 && !pg::ArgIsNull(fcinfo, 3);
  const std::string_view group =
      has_group ? pg::KeyArg(fcinfo, 3, "group_key") : std::string_view();

  pg::SpiSession spi;
  const bool topic_rights = api::TopicsTableExists();
  if (topic_rights) {
    api::RequireTopicRight(spi, topic, api::TopicRight::kPublish);
  } else {
    api::RequireRightSomewhere(spi, core::kProduce);
  }
  const std::vector<store::Subscriber> queues = store::Subscribers(spi, topic);
  if (!topic_rights) {
    for (const store::Subscriber& q : queues)
      api::RequireRight(spi, q.queue_id, q.name, core::kProduce);
  }
  // In queue id order, like every other taker of several queue locks.
  for (const store::Subscriber& q : queues) pg::LockQueueShared(q.queue_id);

  const std::optional<int64> inserted_event =
      store::RecordEvent(spi, topic, payload, has_dedupe ? PG_GETARG_DATUM(2) : 0);
  if (!inserted_event) {
    // Published before with this dedupe key: that event and its jobs stand.
    const std::optional<int64> earlier = store::FindEvent(spi, topic, PG_GETARG_DATUM(2));
    if (!earlier) {
      pg::Raise(ERRCODE_T_R_SERIALIZATION_FAILURE,
                "event with this dedupe_key changed concurrently", "", "Retry the transaction.");
    }
    PG_RETURN_INT64(*earlier);
  }
  const int64 event_id = *inserted_event;
  api::AppendToStreams(spi, topic, event_id, payload, has_group,
                       has_group ? PG_GETARG_DATUM(3) : static_cast<Datum>(0));
  if (queues.empty()) PG_RETURN_INT64(event_id);

  // One job per queue that still exists now that we hold the queues' locks
  // (a queue dropped first simply gets none).
  auto targets = pg::MakeSmallVector<store::Queue, 8>(CurrentMemoryContext);
  for (const store::Subscriber& q : queues)
    targets.push_back(store::Queue{q.queue_id, q.name, q.notify});
  store::InsertEvent(spi, targets.data(), static_cast<int>(targets.size()), event_id,
                     pg::TextDatum(topic), payload, GetCurrentTransactionStartTimestamp(),
                     has_group ? PG_GETARG_DATUM(3) : static_cast<Datum>(0), group);
  PG_RETURN_INT64(event_id);
}
