// Subscriptions and events of the transactional outbox: pgq.subscriptions,
// pgq.stream_subscriptions, pgq.events (store/outbox.h).
#include "store/outbox.h"

#include "pg/args.h"

namespace pgq::store {

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
    "SELECT s.queue_id, q.notify, q.name, COALESCE(q.max_pending, 0) AS max_pending"
    "  FROM pgq.subscriptions s"
    "  JOIN pgq.queues q ON q.queue_id = s.queue_id"
    " WHERE s.topic = $1 ORDER BY s.queue_id",
    1,
    {TEXTOID},
    nullptr};

pg::Statement insert_event = {
    "INSERT INTO pgq.events (topic, payload, dedupe_key, trace_context) VALUES ($1, $2, $3, $4)"
    " ON CONFLICT (topic, dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING RETURNING id",
    4,
    {TEXTOID, JSONBOID, TEXTOID, TEXTOID},
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
    "                                     'group_key', $4) END AS envelope",
    4,
    {INT8OID, TEXTOID, JSONBOID, TEXTOID},
    nullptr};

}  // namespace

void Subscribe(pg::SpiSession& spi, std::string_view topic, int32 queue_id) {
  pg::Params params;
  params.Set(0, pg::TextDatum(topic)).Set(1, Int32GetDatum(queue_id));
  spi.Execute(insert_subscription, params);
}

bool Unsubscribe(pg::SpiSession& spi, std::string_view topic, std::string_view queue) {
  pg::Params params;
  params.Set(0, pg::TextDatum(topic)).Set(1, pg::TextDatum(queue));
  return spi.Execute(delete_subscription, params).size() == 1;
}

void SubscribeStream(pg::SpiSession& spi, std::string_view topic, int32 stream_id) {
  pg::Params params;
  params.Set(0, pg::TextDatum(topic)).Set(1, Int32GetDatum(stream_id));
  spi.Execute(insert_stream_subscription, params);
}

bool UnsubscribeStream(pg::SpiSession& spi, std::string_view topic, int32 stream_id) {
  pg::Params params;
  params.Set(0, pg::TextDatum(topic)).Set(1, Int32GetDatum(stream_id));
  return spi.Execute(delete_stream_subscription, params).size() == 1;
}

std::vector<Subscriber> Subscribers(pg::SpiSession& spi, std::string_view topic) {
  pg::Params params;
  params.Set(0, pg::TextDatum(topic));
  const pg::Result rows = spi.Execute(subscribers, params);
  std::vector<Subscriber> found;
  if (rows.empty()) return found;
  const int queue_id = rows.ColumnNumber("queue_id"), notify = rows.ColumnNumber("notify"),
            name = rows.ColumnNumber("name"), max_pending = rows.ColumnNumber("max_pending");
  found.reserve(rows.size());
  for (uint64 row = 0; row < rows.size(); ++row) {
    found.push_back(Subscriber{rows.Int32(row, queue_id), rows.Bool(row, notify),
                               rows.Text(row, name), rows.Int32(row, max_pending)});
  }
  return found;
}

std::vector<std::string> StreamSubscribers(pg::SpiSession& spi, std::string_view topic) {
  pg::Params params;
  params.Set(0, pg::TextDatum(topic));
  const pg::Result rows = spi.Execute(stream_subscribers, params);
  std::vector<std::string> names;
  if (rows.empty()) return names;
  const int name = rows.ColumnNumber("name");
  names.reserve(rows.size());
  for (uint64 row = 0; row < rows.size(); ++row) names.push_back(rows.Text(row, name));
  return names;
}

Datum EventEnvelope(pg::SpiSession& spi, int64 event_id, std::string_view topic, Datum payload,
                    Datum group_key) {
  pg::Params wrap;
  wrap.Set(0, Int64GetDatum(event_id))
      .Set(1, pg::TextDatum(topic))
      .Set(2, payload)
      .SetOptional(3, group_key == 0, group_key);
  const pg::Result wrapped = spi.Execute(envelope, wrap, 1);
  bool is_null = false;
  return wrapped.Value(0, "envelope", &is_null);
}

std::optional<int64> RecordEvent(pg::SpiSession& spi, std::string_view topic, Datum payload,
                                 Datum dedupe_key, Datum trace_context) {
  pg::Params event;
  event.Set(0, pg::TextDatum(topic))
      .Set(1, payload)
      .SetOptional(2, dedupe_key == 0, dedupe_key)
      .SetOptional(3, trace_context == 0, trace_context);
  const pg::Result inserted = spi.Execute(insert_event, event);
  if (inserted.empty()) return std::nullopt;
  return inserted.Int64(0, "id");
}

std::optional<int64> FindEvent(pg::SpiSession& spi, std::string_view topic, Datum dedupe_key) {
  pg::Params key;
  key.Set(0, pg::TextDatum(topic)).Set(1, dedupe_key);
  const pg::Result earlier = spi.Execute(find_event, key, 1);
  if (earlier.empty()) return std::nullopt;
  return earlier.Int64(0, "id");
}

int64 DropOldEvents(pg::SpiSession& spi, TimestampTz now, int32 limit) {
  pg::Params params;
  params.Set(0, TimestampTzGetDatum(now)).Set(1, Int32GetDatum(limit));
  return static_cast<int64>(spi.Execute(drop_old_events, params).size());
}

}  // namespace pgq::store
