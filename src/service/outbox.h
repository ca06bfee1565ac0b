// The outbox's fan-out: what pgq.publish does once the caller's rights are
// checked. The event is recorded and one job enqueued per subscribed queue
// in the caller's transaction, so the event and its jobs exist if and only
// if the business change commits; subscribed streams (2.0) get the event
// appended.
#pragma once

#include <string_view>
#include <vector>

#include "pg/spi.h"
#include "store/outbox.h"

namespace pgq::service {

// A publish of `payload` (jsonb) to `topic`, whose subscribed queues are
// `queues` (store::Subscribers, by id); `dedupe_key` and `group_key` text
// Datums or 0, `group` the group key as a string. Takes the queues' share
// locks (in id order), records the event and fans it out; the event's id,
// or the id of the event published before with the same dedupe key (then
// nothing else is done). `trace_context` (text, or 0: none): the
// publisher's, on the event, every job and every stream event.
int64 Publish(pg::SpiSession& spi, std::string_view topic,
              const std::vector<store::Subscriber>& queues, Datum payload, Datum dedupe_key,
              Datum group_key, std::string_view group, Datum trace_context);

}  // namespace pgq::service
