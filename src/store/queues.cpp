// The statements on pgq.queues (store/queues.h).
#include "store/queues.h"

#include "pg/args.h"
#include "store/catalog.h"
#include "store/ring_jobs.h"

namespace pgq::store {

namespace {

// And whether enqueues must look at the queue's dedupe periods.
pg::Statement find_queue = {
    "SELECT queue_id, max_attempts, notify, paused, lease,"
    "       COALESCE(rate_limit, 0)::float8 AS rate_limit,"
    "       dedupe_periods, COALESCE(max_running, 0) AS max_running, group_concurrency,"
    "       COALESCE(ring_id, 0) AS ring_id, keep_completed > '0' AS keeps_history,"
    "       dedupe_replaces, COALESCE(max_pending, 0) AS max_pending"
    "  FROM pgq.queues WHERE name = $1",
    1,
    {TEXTOID},
    nullptr};

// $10: the owner, the role creating the queue (passed: the statement runs
// as the owner of pgq's tables, so the column's CURRENT_USER default would
// name that role instead).
pg::Statement insert_queue = {
    "INSERT INTO pgq.queues (name, max_attempts, lease, backoff_base, backoff_max, retention, "
    "notify, handler, rate_limit, owner) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) "
    "ON CONFLICT (name) DO NOTHING",
    10,
    {TEXTOID, INT4OID, INTERVALOID, INTERVALOID, INTERVALOID, INTERVALOID, BOOLOID, TEXTOID,
     FLOAT4OID, NAMEOID},
    nullptr};

pg::Statement lock_queue_row = {
    "SELECT max_attempts, lease, backoff_base, backoff_max, retention, notify, handler, "
    "       owner::text, COALESCE(rate_limit, 0)::float8 AS rate_limit, queue_id "
    "FROM pgq.queues WHERE name = $1 FOR UPDATE",
    1,
    {TEXTOID},
    nullptr};

pg::Statement update_queue = {
    "UPDATE pgq.queues SET max_attempts = $2, lease = $3, backoff_base = $4, backoff_max = $5, "
    "retention = $6, notify = $7, handler = $8, rate_limit = $9 WHERE name = $1",
    9,
    {TEXTOID, INT4OID, INTERVALOID, INTERVALOID, INTERVALOID, INTERVALOID, BOOLOID, TEXTOID,
     FLOAT4OID},
    nullptr};

// 1.2: how long completed and dead jobs are kept; NULL leaves a value as it
// is (keep_dead NULL: dead jobs are kept until retried or purged).
pg::Statement store_keep = {
    "UPDATE pgq.queues SET keep_completed = COALESCE($2, keep_completed),"
    " keep_dead = COALESCE($3, keep_dead) WHERE name = $1",
    3,
    {TEXTOID, INTERVALOID, INTERVALOID},
    nullptr};

// 1.2: the concurrency caps. $2 max_running (0: none), $3
// group_concurrency; NULL leaves a value as it is.
pg::Statement store_caps = {
    "UPDATE pgq.queues SET max_running = CASE WHEN $2 IS NULL THEN max_running"
    "                                         WHEN $2 = 0 THEN NULL ELSE $2 END,"
    " group_concurrency = COALESCE($3, group_concurrency) WHERE name = $1",
    3,
    {TEXTOID, INT4OID, INT4OID},
    nullptr};

// 3.1: $2 the fairness ('group'), NULL for none.
pg::Statement store_fairness = {
    "UPDATE pgq.queues SET fairness = $2 WHERE name = $1", 2, {TEXTOID, TEXTOID}, nullptr};

// 3.1: $1 queue id, $2 group key, $3 weight (1: none kept).
pg::Statement set_group_weight = {R"sql(
WITH gone AS (DELETE FROM pgq.group_weights WHERE queue_id = $1 AND group_key = $2 AND $3 = 1)
INSERT INTO pgq.group_weights (queue_id, group_key, weight)
SELECT $1, $2, $3 WHERE $3 <> 1
ON CONFLICT (queue_id, group_key) DO UPDATE SET weight = EXCLUDED.weight)sql",
                                  3,
                                  {INT4OID, TEXTOID, INT4OID},
                                  nullptr};

pg::Statement read_group_weights = {
    "SELECT group_key, weight FROM pgq.group_weights WHERE queue_id = $1 ORDER BY group_key",
    1,
    {INT4OID},
    nullptr};

// 3.1: $2 jobs a second per group key, NULL for no limit.
pg::Statement store_max_pending = {
    "UPDATE pgq.queues SET max_pending = $2 WHERE name = $1", 2, {TEXTOID, INT4OID}, nullptr};

pg::Statement max_pending_of = {
    "SELECT COALESCE(max_pending, 0) AS max_pending FROM pgq.queues WHERE queue_id = $1",
    1,
    {INT4OID},
    nullptr};

pg::Statement queues_with_max_pending = {
    "SELECT queue_id, name FROM pgq.queues WHERE max_pending IS NOT NULL ORDER BY queue_id",
    0,
    {},
    nullptr};

pg::Statement store_key_rate = {"UPDATE pgq.queues SET rate_limit_per_key = $2 WHERE name = $1",
                                2,
                                {TEXTOID, FLOAT4OID},
                                nullptr};

pg::Statement delete_queue = {
    "DELETE FROM pgq.queues WHERE queue_id = $1 RETURNING COALESCE(ring_id, 0) AS ring_id",
    1,
    {INT4OID},
    nullptr};

// The queue's ring id (ADR 0028), drawn from the streams' sequence so that
// pgq.rings holds both without a clash; none if it has one.
pg::Statement set_ring = {
    "UPDATE pgq.queues SET ring_id = pg_catalog.nextval('pgq.stream_id_seq')::int4"
    " WHERE name = $1 AND ring_id IS NULL RETURNING ring_id",
    1,
    {TEXTOID},
    nullptr};

pg::Statement set_paused = {
    "UPDATE pgq.queues SET paused = $2 WHERE name = $1 RETURNING paused, queue_id",
    2,
    {TEXTOID, BOOLOID},
    nullptr};

// The first job enqueued with a dedupe_for marks its queue: from then on,
// enqueues with a dedupe key look at the keys held past their jobs
// (store/keys.cpp), which costs the others nothing until then. The mark
// commits with that job, so before any such job can finish and hold a key.
pg::Statement mark_dedupe_replaces = {
    "UPDATE pgq.queues SET dedupe_replaces = true WHERE queue_id = $1 AND NOT dedupe_replaces",
    1,
    {INT4OID},
    nullptr};

pg::Statement mark_dedupe_periods = {
    "UPDATE pgq.queues SET dedupe_periods = true WHERE queue_id = $1 AND NOT dedupe_periods",
    1,
    {INT4OID},
    nullptr};

// The queue row stays locked until commit, so it cannot be dropped between
// the check of its owner and the grant's insert.
pg::Statement lock_queue_owner = {
    "SELECT queue_id, owner::text FROM pgq.queues WHERE name = $1 FOR KEY SHARE",
    1,
    {TEXTOID},
    nullptr};

pg::Statement list_retention = {
    "SELECT queue_id, retention FROM pgq.queues ORDER BY queue_id", 0, {}, nullptr};

pg::Statement queue_names = {"SELECT queue_id, name FROM pgq.queues ORDER BY name", 0, {}, nullptr};

pg::Statement handler_queues = {
    "SELECT name, handler, owner::text FROM pgq.queues"
    " WHERE handler IS NOT NULL AND NOT paused ORDER BY queue_id",
    0,
    {},
    nullptr};

pg::Statement has_handler_queues = {
    "SELECT EXISTS (SELECT 1 FROM pgq.queues WHERE handler IS NOT NULL AND NOT paused)"
    " AS has_handlers",
    0,
    {},
    nullptr};

// Runs insert_queue (with `owner`) or update_queue; returns the rows
// written. An empty handler is stored as NULL (no handler).
uint64 StoreSettings(pg::SpiSession& spi, pg::Statement& statement, std::string_view name,
                     const QueueSettings& s, const std::string& handler, Datum owner = 0) {
  pg::Params params;
  if (owner != 0) params.Set(9, owner);
  params.Set(0, pg::TextDatum(name))
      .Set(1, Int32GetDatum(s.max_attempts))
      .Set(2, IntervalPGetDatum(s.lease))
      .Set(3, IntervalPGetDatum(s.backoff_base))
      .Set(4, IntervalPGetDatum(s.backoff_max))
      .Set(5, IntervalPGetDatum(s.retention))
      .Set(6, BoolGetDatum(s.notify))
      .SetOptional(7, handler.empty(), handler.empty() ? 0 : pg::TextDatum(handler))
      .SetOptional(8, s.rate_limit == 0, Float4GetDatum(static_cast<float4>(s.rate_limit)));
  return spi.Execute(statement, params).size();
}

}  // namespace

std::optional<pg::CachedQueue> FindQueue(pg::SpiSession& spi, std::string_view name) {
  pg::Params params;
  params.Set(0, pg::TextDatum(name));
  const pg::Result found = spi.Execute(find_queue, params, 1);
  if (found.empty()) return std::nullopt;
  bool is_null = false;
  const Interval lease = *DatumGetIntervalP(found.Value(0, "lease", &is_null));
  return pg::CachedQueue{found.Int32(0, "queue_id"),
                         found.Int32(0, "max_attempts"),
                         found.Bool(0, "notify"),
                         found.Bool(0, "paused"),
                         lease,
                         found.Float8(0, "rate_limit"),
                         found.Bool(0, "dedupe_periods"),
                         found.Int32(0, "max_running"),
                         found.Int32(0, "group_concurrency"),
                         found.Int32(0, "ring_id"),
                         found.Bool(0, "keeps_history"),
                         found.Bool(0, "dedupe_replaces"),
                         found.Int32(0, "max_pending")};
}

bool InsertQueue(pg::SpiSession& spi, std::string_view name, const QueueSettings& settings,
                 const std::string& handler, Datum owner) {
  return StoreSettings(spi, insert_queue, name, settings, handler, owner) == 1;
}

std::optional<LockedQueue> LockQueueRow(pg::SpiSession& spi, std::string_view name) {
  pg::Params lookup;
  lookup.Set(0, pg::TextDatum(name));
  const pg::Result stored = spi.Execute(lock_queue_row, lookup);
  if (stored.empty()) return std::nullopt;
  const auto interval = [&](const char* column) {
    bool is_null = false;
    return DatumGetIntervalP(stored.Value(0, column, &is_null));
  };
  return LockedQueue{
      stored.Int32(0, "queue_id"),
      QueueSettings{stored.Int32(0, "max_attempts"), interval("lease"), interval("backoff_base"),
                    interval("backoff_max"), interval("retention"), stored.Bool(0, "notify"),
                    stored.Float8(0, "rate_limit")},
      stored.Text(0, "handler"), stored.Text(0, "owner")};
}

void UpdateQueue(pg::SpiSession& spi, std::string_view name, const QueueSettings& settings,
                 const std::string& handler) {
  StoreSettings(spi, update_queue, name, settings, handler);
}

void StoreKeep(pg::SpiSession& spi, std::string_view name, Datum keep_completed, Datum keep_dead) {
  pg::Params params;
  params.Set(0, pg::TextDatum(name))
      .SetOptional(1, keep_completed == 0, keep_completed)
      .SetOptional(2, keep_dead == 0, keep_dead);
  spi.Execute(store_keep, params);
}

void StoreCaps(pg::SpiSession& spi, std::string_view name, bool has_max, Datum max_running,
               bool has_group, Datum group_concurrency) {
  pg::Params params;
  params.Set(0, pg::TextDatum(name))
      .SetOptional(1, !has_max, max_running)
      .SetOptional(2, !has_group, group_concurrency);
  spi.Execute(store_caps, params);
}

void StoreFairness(pg::SpiSession& spi, std::string_view name, std::string_view fairness) {
  pg::Params params;
  params.Set(0, pg::TextDatum(name))
      .SetOptional(1, fairness.empty(), fairness.empty() ? Datum{0} : pg::TextDatum(fairness));
  spi.Execute(store_fairness, params);
}

void StoreKeyRate(pg::SpiSession& spi, std::string_view name, double rate) {
  pg::Params params;
  params.Set(0, pg::TextDatum(name))
      .SetOptional(1, rate <= 0, Float4GetDatum(static_cast<float4>(rate)));
  spi.Execute(store_key_rate, params);
}

void StoreMaxPending(pg::SpiSession& spi, std::string_view name, int32 max_pending) {
  pg::Params params;
  params.Set(0, pg::TextDatum(name)).SetOptional(1, max_pending <= 0, Int32GetDatum(max_pending));
  spi.Execute(store_max_pending, params);
}

std::optional<int32> MaxPendingOf(pg::SpiSession& spi, int32 queue_id) {
  pg::Params params;
  params.Set(0, Int32GetDatum(queue_id));
  const pg::Result row = spi.ExecuteSeeingLatest(max_pending_of, params, 1);
  if (row.empty()) return std::nullopt;
  return row.Int32(0, "max_pending");
}

std::vector<std::pair<int32, std::string>> QueuesWithMaxPending(pg::SpiSession& spi) {
  pg::Params none;
  const pg::Result rows = spi.Execute(queues_with_max_pending, none);
  std::vector<std::pair<int32, std::string>> found;
  found.reserve(rows.size());
  for (uint64 row = 0; row < rows.size(); ++row) {
    found.emplace_back(rows.Int32(row, "queue_id"), rows.Text(row, "name"));
  }
  return found;
}

void SetGroupWeight(pg::SpiSession& spi, int32 queue_id, Datum group_key, int32 weight) {
  pg::Params params;
  params.Set(0, Int32GetDatum(queue_id)).Set(1, group_key).Set(2, Int32GetDatum(weight));
  spi.Execute(set_group_weight, params);
}

pg::Result ReadGroupWeights(pg::SpiSession& spi, int32 queue_id) {
  pg::Params params;
  params.Set(0, Int32GetDatum(queue_id));
  return spi.Execute(read_group_weights, params);
}

std::optional<int32> SetPaused(pg::SpiSession& spi, std::string_view name, bool paused) {
  pg::Params params;
  params.Set(0, pg::TextDatum(name)).Set(1, BoolGetDatum(paused));
  const pg::Result stored = spi.Execute(set_paused, params);
  if (stored.empty()) return std::nullopt;
  return stored.Int32(0, "queue_id");
}

void DeleteQueue(pg::SpiSession& spi, int32 queue_id, TimestampTz now) {
  pg::Params by_id;
  by_id.Set(0, Int32GetDatum(queue_id));
  const pg::Result deleted = spi.Execute(delete_queue, by_id);
  const int32 ring_id = deleted.empty() ? 0 : deleted.Int32(0, "ring_id");
  if (ring_id != 0) ring::DropRings(spi, queue_id, ring_id, now);
}

void GiveQueueRing(pg::SpiSession& spi, std::string_view name, TimestampTz now) {
  pg::Params params;
  params.Set(0, pg::TextDatum(name));
  const pg::Result set = spi.Execute(set_ring, params);
  if (!set.empty()) ring::CreateRing(spi, set.Int32(0, "ring_id"), now);
}

void MarkDedupeReplaces(pg::SpiSession& spi, int32 queue_id) {
  pg::Params params;
  params.Set(0, Int32GetDatum(queue_id));
  spi.Execute(mark_dedupe_replaces, params);
}

void MarkDedupePeriods(pg::SpiSession& spi, int32 queue_id) {
  pg::Params params;
  params.Set(0, Int32GetDatum(queue_id));
  spi.Execute(mark_dedupe_periods, params);
}

std::optional<QueueOwner> LockQueueOwner(pg::SpiSession& spi, std::string_view name) {
  pg::Params lookup;
  lookup.Set(0, pg::TextDatum(name));
  const pg::Result found = spi.Execute(lock_queue_owner, lookup, 1);
  if (found.empty()) return std::nullopt;
  return QueueOwner{found.Int32(0, "queue_id"), found.Text(0, "owner")};
}

std::vector<QueueRetention> QueueRetentions(pg::SpiSession& spi) {
  pg::Params none;
  const pg::Result queues = spi.Execute(list_retention, none);
  std::vector<QueueRetention> retentions;
  retentions.reserve(queues.size());
  for (uint64 row = 0; row < queues.size(); ++row) {
    bool is_null = false;
    const int64 keep = pg::IntervalMicros(
        DatumGetIntervalP(queues.Value(row, "retention", &is_null)), "retention");
    retentions.push_back(QueueRetention{queues.Int32(row, "queue_id"), keep});
  }
  return retentions;
}

std::vector<HandlerQueue> HandlerQueues(pg::SpiSession& spi) {
  pg::Params none;
  const pg::Result queues = spi.Execute(handler_queues, none);
  std::vector<HandlerQueue> found;
  if (queues.empty()) return found;
  const int name = queues.ColumnNumber("name"), handler = queues.ColumnNumber("handler"),
            owner = queues.ColumnNumber("owner");
  found.reserve(queues.size());
  for (uint64 row = 0; row < queues.size(); ++row) {
    found.push_back(
        HandlerQueue{queues.Text(row, name), queues.Text(row, handler), queues.Text(row, owner)});
  }
  return found;
}

bool HasHandlerQueues(pg::SpiSession& spi) {
  pg::Params none;
  return spi.Execute(has_handler_queues, none).Bool(0, "has_handlers");
}

namespace {
pg::Statement fair_queue_names = {
    "SELECT queue_id, name FROM pgq.queues"
    " WHERE fairness IS NOT NULL OR rate_limit_per_key IS NOT NULL ORDER BY name",
    0,
    {},
    nullptr};

std::vector<QueueName> NamesOf(pg::SpiSession& spi, pg::Statement& statement) {
  pg::Params none;
  const pg::Result rows = spi.Execute(statement, none);
  std::vector<QueueName> names;
  if (rows.empty()) return names;
  const int id = rows.ColumnNumber("queue_id"), name = rows.ColumnNumber("name");
  names.reserve(rows.size());
  for (uint64 row = 0; row < rows.size(); ++row) {
    bool is_null = false;
    names.push_back(QueueName{rows.Int32(row, id), rows.Value(row, name, &is_null)});
  }
  return names;
}
}  // namespace

std::vector<QueueName> QueueNames(pg::SpiSession& spi) { return NamesOf(spi, queue_names); }

std::vector<QueueName> FairQueueNames(pg::SpiSession& spi) {
  return NamesOf(spi, fair_queue_names);
}

}  // namespace pgq::store
