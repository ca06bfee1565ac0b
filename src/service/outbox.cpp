// The outbox's fan-out (service/outbox.h).
#include "service/outbox.h"

#include "pg/allocator.h"
#include "pg/args.h"
#include "pg/queue_lock.h"
#include "service/backpressure.h"
#include "store/jobs.h"
#include "store/streams.h"

namespace pgq::service {

namespace {

// Appends the published event to each subscribed stream (2.0).
void AppendToStreams(pg::SpiSession& spi, std::string_view topic, int64 event_id, Datum payload,
                     Datum group_key, Datum trace_context) {
  const std::vector<std::string> streams = store::StreamSubscribers(spi, topic);
  if (streams.empty()) return;
  const Datum event = store::EventEnvelope(spi, event_id, topic, payload, group_key);
  for (const std::string& name : streams) {
    // A subscribed stream dropped meanwhile gets nothing, as a queue.
    const std::optional<store::streams::Stream> stream = store::streams::Find(spi, name);
    if (!stream) continue;
    int64 id = 0;
    (void)store::streams::Append(spi, *stream, &event, 1, &id, /*missing_ok=*/true, trace_context);
  }
}

}  // namespace

int64 Publish(pg::SpiSession& spi, std::string_view topic,
              const std::vector<store::Subscriber>& queues, Datum payload, Datum dedupe_key,
              Datum group_key, std::string_view group, Datum trace_context) {
  // In queue id order, like every other taker of several queue locks.
  for (const store::Subscriber& q : queues) pg::LockQueueShared(q.queue_id);

  const std::optional<int64> inserted_event =
      store::RecordEvent(spi, topic, payload, dedupe_key, trace_context);
  if (!inserted_event) {
    // Published before with this dedupe key: that event and its jobs stand.
    const std::optional<int64> earlier = store::FindEvent(spi, topic, dedupe_key);
    if (!earlier) {
      pg::Raise(ERRCODE_T_R_SERIALIZATION_FAILURE,
                "event with this dedupe_key changed concurrently", "", "Retry the transaction.");
    }
    return *earlier;
  }
  const int64 event_id = *inserted_event;
  // Room in every subscribed queue with a max_pending, or nothing of the
  // publish (53400 rolls it back whole: its event, its streams' events).
  for (const store::Subscriber& q : queues) {
    ReserveRoom(spi, q.queue_id, q.name, q.max_pending, 1);
  }
  AppendToStreams(spi, topic, event_id, payload, group_key, trace_context);
  if (queues.empty()) return event_id;

  // One job per queue that still exists now that we hold the queues' locks
  // (a queue dropped first simply gets none).
  auto targets = pg::MakeSmallVector<store::Queue, 8>(CurrentMemoryContext);
  for (const store::Subscriber& q : queues) {
    targets.push_back(store::Queue{q.queue_id, q.name, q.notify});
  }
  store::InsertEvent(spi, targets.data(), static_cast<int>(targets.size()), event_id,
                     pg::TextDatum(topic), payload, GetCurrentTransactionStartTimestamp(),
                     group_key, group, trace_context);
  return event_id;
}

}  // namespace pgq::service
