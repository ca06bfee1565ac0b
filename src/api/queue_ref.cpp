#include "api/queue_ref.h"

#include "pg/args.h"
#include "pg/invalidation.h"
#include "store/catalog.h"

namespace pgq::api {

namespace {

pg::Statement find_queue = {
    "SELECT queue_id, max_attempts, notify, paused, lease, COALESCE(rate_limit, 0)::float8 "
    "  FROM pgq.queues WHERE name = $1",
    1,
    {TEXTOID},
    nullptr};

// 1.2 catalogs: and whether enqueues must look at the queue's dedupe periods.
pg::Statement find_queue_1_2 = {
    "SELECT queue_id, max_attempts, notify, paused, lease, COALESCE(rate_limit, 0)::float8, "
    "       dedupe_periods, COALESCE(max_running, 0), group_concurrency"
    "  FROM pgq.queues WHERE name = $1",
    1,
    {TEXTOID},
    nullptr};

}  // namespace

void RaiseUnknownQueue(std::string_view name) {
  pg::Raise(ERRCODE_UNDEFINED_OBJECT, "queue \"" + std::string(name) + "\" does not exist", {},
            "Create it with pgq.create_queue('" + std::string(name) + "').");
}

QueueRef FindQueue(pg::SpiSession& spi, std::string_view name) {
  pg::Params params;
  params.Set(0, pg::TextDatum(name));
  const bool lifecycle = store::InstalledCatalog().lifecycle;
  const pg::Result found = spi.Execute(lifecycle ? find_queue_1_2 : find_queue, params, 1);
  if (found.empty()) RaiseUnknownQueue(name);
  bool is_null = false;
  const Interval lease = *DatumGetIntervalP(found.Value(0, 5, &is_null));
  return QueueRef{found.Int32(0, 1),
                  found.Int32(0, 2),
                  found.Bool(0, 3),
                  found.Bool(0, 4),
                  lease,
                  found.Float8(0, 6),
                  lifecycle && found.Bool(0, 7),
                  lifecycle ? found.Int32(0, 8) : 0,
                  lifecycle ? found.Int32(0, 9) : 1};
}

pg::CachedQueue CachedOrFoundQueue(pg::SpiSession& spi, std::string_view name) {
  pg::CachedQueue queue;
  if (pg::QueueCache::Find(name, &queue)) return queue;
  const uint64 begun = pg::QueueCache::Begin();
  queue = FindQueue(spi, name);  // raises undefined_object
  pg::QueueCache::Remember(name, queue, begun);
  return queue;
}

pg::CachedQueue CurrentQueue(pg::SpiSession& spi, std::string_view name) {
  pg::invalidation::Accept();
  return CachedOrFoundQueue(spi, name);
}

}  // namespace pgq::api
