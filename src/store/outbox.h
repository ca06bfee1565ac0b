// The transactional outbox's rows: topics and their grants (topics.cpp:
// pgq.topics, pgq.topic_grants), subscriptions of queues and streams and
// the events published (outbox.cpp: pgq.subscriptions,
// pgq.stream_subscriptions, pgq.events). The SQL functions and the rights
// are api/outbox.cpp and api/topics.cpp; the jobs a publish enqueues are the
// jobs store's (store::InsertEvent).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pg/spi.h"

namespace pgq::store {

// ---- Topics (topics.cpp).

// Creates topic `topic` owned by `owner`; false when it exists.
bool InsertTopic(pg::SpiSession& spi, std::string_view topic, Oid owner);
// Drops it; whether it existed.
bool DeleteTopic(pg::SpiSession& spi, std::string_view topic);
// A topic's owner and the roles granted `privilege` on it.
struct TopicHolders {
  Oid owner = InvalidOid;
  std::vector<Oid> granted;
};
// Topic `topic`'s holders of `privilege` ('publish' or 'subscribe'), its
// row locked (FOR KEY SHARE) until the end of the transaction so that it
// cannot be dropped meanwhile; nullopt when there is no such topic.
std::optional<TopicHolders> LockTopicHolders(pg::SpiSession& spi, std::string_view topic,
                                             std::string_view privilege);
// Grants `privilege` on `topic` to `role`: false when it held it already.
bool InsertTopicGrant(pg::SpiSession& spi, Oid role, std::string_view topic,
                      std::string_view privilege);
// Revokes it: false when there was no such grant.
bool DeleteTopicGrant(pg::SpiSession& spi, Oid role, std::string_view topic,
                      std::string_view privilege);
// Deletes the topic grants of roles dropped since.
void DropOrphanTopicGrants(pg::SpiSession& spi);

// ---- Subscriptions and events (outbox.cpp).

void Subscribe(pg::SpiSession& spi, std::string_view topic, int32 queue_id);
// Whether queue `queue`'s subscription to `topic` existed.
bool Unsubscribe(pg::SpiSession& spi, std::string_view topic, std::string_view queue);
void SubscribeStream(pg::SpiSession& spi, std::string_view topic, int32 stream_id);
bool UnsubscribeStream(pg::SpiSession& spi, std::string_view topic, int32 stream_id);

// A queue subscribed to a topic.
struct Subscriber {
  int32 queue_id;
  bool notify;
  std::string name;
  int32 max_pending;  // 0: none
};
// The queues subscribed to `topic`, by id.
std::vector<Subscriber> Subscribers(pg::SpiSession& spi, std::string_view topic);
// The names of the streams subscribed to `topic`, by id.
std::vector<std::string> StreamSubscribers(pg::SpiSession& spi, std::string_view topic);
// The envelope of an event as a subscribed stream receives it (jsonb):
// event_id, topic, payload and, when `group_key` is not 0, group_key. In
// the caller's SpiSession, until it ends.
Datum EventEnvelope(pg::SpiSession& spi, int64 event_id, std::string_view topic, Datum payload,
                    Datum group_key);

// Records an event of `topic`: its id, or nullopt when one with the same
// `dedupe_key` (a text Datum, 0 for none) was published before; with its
// publisher's `trace_context` (text, or 0: none).
std::optional<int64> RecordEvent(pg::SpiSession& spi, std::string_view topic, Datum payload,
                                 Datum dedupe_key, Datum trace_context);
// The event of `topic` published with `dedupe_key`, if there is one.
std::optional<int64> FindEvent(pg::SpiSession& spi, std::string_view topic, Datum dedupe_key);
// Drops up to `limit` events older than the longest retention of any queue;
// returns how many.
int64 DropOldEvents(pg::SpiSession& spi, TimestampTz now, int32 limit);

}  // namespace pgq::store
