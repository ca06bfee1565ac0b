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
#include "api/outbox.h"

#include "api/queue_ref.h"
#include "api/rights.h"
#include "api/stream_rights.h"
#include "api/topics.h"
#include "pg/allocator.h"
#include "pg/args.h"
#include "pg/queue_lock.h"
#include "store/catalog.h"
#include "store/jobs.h"
#include "store/streams.h"

namespace pgq::api {

namespace {

pg::Statement insert_subscription = {
    "INSERT INTO pgq.subscriptions (topic, queue_id) VALUES ($1, $2) ON CONFLICT DO NOTHING",
    2,
    {TEXTOID, INT4OID},
    nullptr};

pg::Statement delete_subscription = {
    "DELETE FROM pgq.subscriptions s USING pgq.queues q"
    " WHERE s.topic = $1 AND q.queue_id = s.queue_id AND q.name = $2",
    2,
    {TEXTOID, TEXTOID},
    nullptr};

pg::Statement subscribers = {
    "SELECT s.queue_id, q.notify, q.name FROM pgq.subscriptions s"
    "  JOIN pgq.queues q ON q.queue_id = s.queue_id"
    " WHERE s.topic = $1 ORDER BY s.queue_id",
    1,
    {TEXTOID},
    nullptr};

pg::Statement insert_event = {
    "INSERT INTO pgq.events (topic, payload, dedupe_key) VALUES ($1, $2, $3)"
    " ON CONFLICT (topic, dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING RETURNING id",
    3,
    {TEXTOID, JSONBOID, TEXTOID},
    nullptr};

pg::Statement find_event = {"SELECT id FROM pgq.events WHERE topic = $1 AND dedupe_key = $2",
                            2,
                            {TEXTOID, TEXTOID},
                            nullptr};

// Events are the audit record of what was published; the jobs carry the
// payload. Kept for the longest retention of any queue.
pg::Statement drop_old_events = {
    "DELETE FROM pgq.events WHERE ctid = ANY (ARRAY("
    "  SELECT ctid FROM pgq.events"
    "   WHERE published_at < $1 - (SELECT COALESCE(pg_catalog.max(retention), '1 day')"
    "                                FROM pgq.queues)"
    "   LIMIT $2))",
    2,
    {TIMESTAMPTZOID, INT4OID},
    nullptr};

pg::Statement insert_stream_subscription = {
    "INSERT INTO pgq.stream_subscriptions (topic, stream_id) VALUES ($1, $2)"
    " ON CONFLICT DO NOTHING",
    2,
    {TEXTOID, INT4OID},
    nullptr};

pg::Statement delete_stream_subscription = {
    "DELETE FROM pgq.stream_subscriptions WHERE topic = $1 AND stream_id = $2",
    2,
    {TEXTOID, INT4OID},
    nullptr};

pg::Statement stream_subscribers = {
    "SELECT st.name FROM pgq.stream_subscriptions s"
    "  JOIN pgq.streams st ON st.stream_id = s.stream_id"
    " WHERE s.topic = $1 ORDER BY s.stream_id",
    1,
    {TEXTOID},
    nullptr};

// The envelope a subscribed queue's job carries, appended to each stream.
pg::Statement envelope = {
    "SELECT CASE WHEN $4 IS NULL"
    "  THEN pg_catalog.jsonb_build_object('event_id', $1, 'topic', $2, 'payload', $3)"
    "  ELSE pg_catalog.jsonb_build_object('event_id', $1, 'topic', $2, 'payload', $3,"
    "                                     'group_key', $4) END",
    4,
    {INT8OID, TEXTOID, JSONBOID, TEXTOID},
    nullptr};

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
  pg::Params topic_param;
  topic_param.Set(0, pg::TextDatum(topic));
  pg::Result streams = spi.Execute(stream_subscribers, topic_param);
  if (streams.empty()) return;
  pg::Params wrap;
  wrap.Set(0, Int64GetDatum(event_id))
      .Set(1, pg::TextDatum(topic))
      .Set(2, payload)
      .SetOptional(3, !has_group, group_key);
  pg::Result wrapped = spi.Execute(envelope, wrap, 1);
  bool is_null = false;
  const Datum event = wrapped.Value(0, 1, &is_null);
  for (uint64 row = 0; row < streams.size(); ++row) {
    // A subscribed stream dropped meanwhile gets nothing, as a queue.
    const std::optional<store::streams::Stream> stream =
        store::streams::Find(spi, streams.Text(row, 1));
    if (!stream) continue;
    int64 id = 0;
    (void)store::streams::Append(spi, *stream, &event, 1, &id, /*missing_ok=*/true);
  }
}

}  // namespace

int64 DropOldEvents(pg::SpiSession& spi, TimestampTz now, int32 limit) {
  pg::Params params;
  params.Set(0, TimestampTzGetDatum(now)).Set(1, Int32GetDatum(limit));
  return static_cast<int64>(spi.Execute(drop_old_events, params).size());
}

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
    pg::Params params;
    params.Set(0, pg::TextDatum(topic)).Set(1, Int32GetDatum(stream.id));
    spi.Execute(api::insert_stream_subscription, params);
    PG_RETURN_VOID();
  }
  const api::QueueRef ref = api::FindQueue(spi, target.queue);
  api::RequireRight(spi, ref.id, target.queue, core::kAdmin);
  if (api::TopicsTableExists()) api::RequireTopicRight(spi, topic, api::TopicRight::kSubscribe);
  pg::Params params;
  params.Set(0, pg::TextDatum(topic)).Set(1, Int32GetDatum(ref.id));
  spi.Execute(api::insert_subscription, params);
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
    pg::Params params;
    params.Set(0, pg::TextDatum(topic)).Set(1, Int32GetDatum(stream.id));
    PG_RETURN_BOOL(spi.Execute(api::delete_stream_subscription, params).size() == 1);
  }
  const std::string_view queue = target.queue;
  const api::QueueRef ref = api::FindQueue(spi, queue);  // unknown: an error, not false
  // The queue's admin, or the topic's owner (who may cut a subscriber off).
  if (!api::TopicsTableExists() || !api::OwnsTopic(spi, topic)) {
    api::RequireRight(spi, ref.id, queue, core::kAdmin);
  }
  pg::Params params;
  params.Set(0, pg::TextDatum(topic)).Set(1, pg::TextDatum(queue));
  PG_RETURN_BOOL(spi.Execute(api::delete_subscription, params).size() == 1);
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
  pg::Params topic_param;
  topic_param.Set(0, pg::TextDatum(topic));
  const pg::Result subscribed = spi.Execute(api::subscribers, topic_param);
  struct Subscriber {
    int32 queue_id;
    bool notify;
    std::string name;
  };
  auto queues = pg::MakeSmallVector<Subscriber, 8>(CurrentMemoryContext);
  for (uint64 row = 0; row < subscribed.size(); ++row) {
    queues.push_back(
        Subscriber{subscribed.Int32(row, 1), subscribed.Bool(row, 2), subscribed.Text(row, 3)});
  }
  if (!topic_rights) {
    for (const Subscriber& q : queues) api::RequireRight(spi, q.queue_id, q.name, core::kProduce);
  }
  // In queue id order, like every other taker of several queue locks.
  for (const Subscriber& q : queues) pg::LockQueueShared(q.queue_id);

  pg::Params event;
  event.Set(0, pg::TextDatum(topic))
      .Set(1, payload)
      .SetOptional(2, !has_dedupe, has_dedupe ? PG_GETARG_DATUM(2) : 0);
  const pg::Result inserted_event = spi.Execute(api::insert_event, event);
  if (inserted_event.empty()) {
    // Published before with this dedupe key: that event and its jobs stand.
    pg::Params key;
    key.Set(0, pg::TextDatum(topic)).Set(1, PG_GETARG_DATUM(2));
    const pg::Result earlier = spi.Execute(api::find_event, key, 1);
    if (earlier.empty()) {
      pg::Raise(ERRCODE_T_R_SERIALIZATION_FAILURE,
                "event with this dedupe_key changed concurrently", "", "Retry the transaction.");
    }
    PG_RETURN_INT64(earlier.Int64(0, 1));
  }
  const int64 event_id = inserted_event.Int64(0, 1);
  api::AppendToStreams(spi, topic, event_id, payload, has_group,
                       has_group ? PG_GETARG_DATUM(3) : static_cast<Datum>(0));
  if (queues.empty()) PG_RETURN_INT64(event_id);

  // One job per queue that still exists now that we hold the queues' locks
  // (a queue dropped first simply gets none).
  auto targets = pg::MakeSmallVector<store::Queue, 8>(CurrentMemoryContext);
  for (const Subscriber& q : queues) targets.push_back(store::Queue{q.queue_id, q.name, q.notify});
  store::InsertEvent(spi, targets.data(), static_cast<int>(targets.size()), event_id,
                     pg::TextDatum(topic), payload, GetCurrentTransactionStartTimestamp(),
                     has_group ? PG_GETARG_DATUM(3) : static_cast<Datum>(0), group);
  PG_RETURN_INT64(event_id);
}
