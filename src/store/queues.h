// The queues' own rows (pgq.queues): their settings, pause, owner, and the
// marks the jobs store needs (dedupe periods). The SQL functions are
// api/queues.cpp (create, alter, drop, pause, resume) and service/queue_ref.cpp
// (a queue by name); every statement that writes pgq.queues is here.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pg/queue_cache.h"
#include "pg/spi.h"

namespace pgq::store {

// The queue named `name` as the cache keeps it (pg/queue_cache.h), if it
// exists.
std::optional<pg::CachedQueue> FindQueue(pg::SpiSession& spi, std::string_view name);

// The settings create_queue and alter_queue write, validated by the caller.
struct QueueSettings {
  int32 max_attempts;
  Interval* lease;
  Interval* backoff_base;
  Interval* backoff_max;
  Interval* retention;
  bool notify;
  double rate_limit;  // claims per second; 0: no limit
};

// Creates queue `name` owned by `owner` (a name Datum) with `handler` (""
// for none): false when a queue of that name exists.
bool InsertQueue(pg::SpiSession& spi, std::string_view name, const QueueSettings& settings,
                 const std::string& handler, Datum owner);

// A queue's row, locked (FOR UPDATE) until the end of the transaction.
// INVARIANT: the intervals live in the caller's SpiSession, until it ends.
struct LockedQueue {
  int32 id;
  QueueSettings settings;
  std::string handler;  // "" for none
  std::string owner;
};
std::optional<LockedQueue> LockQueueRow(pg::SpiSession& spi, std::string_view name);
// Writes the settings of queue `name` (locked by LockQueueRow).
void UpdateQueue(pg::SpiSession& spi, std::string_view name, const QueueSettings& settings,
                 const std::string& handler);
// How long completed and dead jobs are kept (interval Datums; 0 leaves a
// value as it is).
void StoreKeep(pg::SpiSession& spi, std::string_view name, Datum keep_completed, Datum keep_dead);
// The concurrency caps: max_running (int4 Datum, 0 removes the cap) and
// group_concurrency; `has_*` false leaves a value as it is.
void StoreCaps(pg::SpiSession& spi, std::string_view name, bool has_max, Datum max_running,
               bool has_group, Datum group_concurrency);
// 3.1: how the queue hands out its ready jobs across group keys (ADR
// 0029): "group", or "" for the order they came.
void StoreFairness(pg::SpiSession& spi, std::string_view name, std::string_view fairness);
// 3.1: jobs a second per group key (0: no limit).
void StoreKeyRate(pg::SpiSession& spi, std::string_view name, double rate);
// max_pending (3.1); 0: none.
void StoreMaxPending(pg::SpiSession& spi, std::string_view name, int32 max_pending);
// The queue's max_pending as committed now (0: none; nullopt: the queue is
// gone), whatever the caller's snapshot: a waiter for room, woken by the
// commit of an alter_queue before its invalidation is sent, reads it so.
std::optional<int32> MaxPendingOf(pg::SpiSession& spi, int32 queue_id);
// The queues with a max_pending: ids and names.
std::vector<std::pair<int32, std::string>> QueuesWithMaxPending(pg::SpiSession& spi);
// 3.1: a group key's weight in a fair queue (1: the row goes).
void SetGroupWeight(pg::SpiSession& spi, int32 queue_id, Datum group_key, int32 weight);
// 3.1: the queue's group keys whose weight is not 1: (group_key, weight), by key.
pg::Result ReadGroupWeights(pg::SpiSession& spi, int32 queue_id);
// Pauses or resumes queue `name`: its id, nullopt when there is none.
std::optional<int32> SetPaused(pg::SpiSession& spi, std::string_view name, bool paused);
// Deletes queue `queue_id`'s row (its jobs and counts are gone already).
// Its ring (ADR 0028) goes with it: the ring's tables at the maintenance's
// next pass (pg/segments.h DropRing).
void DeleteQueue(pg::SpiSession& spi, int32 queue_id, TimestampTz now);
// Gives queue `name` its ring (ADR 0028) unless it has one: at
// create_queue, and for a queue of 2.x at the maintenance's first pass
// after the update (store/ring_jobs.h GiveRings).
void GiveQueueRing(pg::SpiSession& spi, std::string_view name, TimestampTz now);
// Some job of `queue_id` was enqueued with a dedupe_for: enqueues with a
// dedupe key look at the keys held past their jobs from now on.
void MarkDedupePeriods(pg::SpiSession& spi, int32 queue_id);
// Some enqueue of `queue_id` had on_duplicate => 'replace': its jobs with a
// dedupe key are rows of pgq.job_rows from now on.
void MarkDedupeReplaces(pg::SpiSession& spi, int32 queue_id);

// Queue `name`'s id and owner, its row locked (FOR KEY SHARE) until the end
// of the transaction so that it cannot be dropped meanwhile.
struct QueueOwner {
  int32 id;
  std::string owner;
};
std::optional<QueueOwner> LockQueueOwner(pg::SpiSession& spi, std::string_view name);

// Every queue's id and retention (microseconds), by id.
struct QueueRetention {
  int32 id;
  int64 retention_us;
};
std::vector<QueueRetention> QueueRetentions(pg::SpiSession& spi);

// Every queue's id and name (a text Datum in the caller's SpiSession, until
// it ends), by name.
struct QueueName {
  int32 id;
  Datum name;
};
std::vector<QueueName> QueueNames(pg::SpiSession& spi);
// 3.1: the queues with fairness or rate_limit_per_key (their lanes keep a
// fair order, ADR 0029), by name.
std::vector<QueueName> FairQueueNames(pg::SpiSession& spi);

// The queues with a handler that are not paused, by id (the handler
// workers, bgw/handler_worker.cpp).
struct HandlerQueue {
  std::string name;
  std::string handler;  // schema-qualified signature, as stored
  std::string owner;
};
std::vector<HandlerQueue> HandlerQueues(pg::SpiSession& spi);
// Whether there is one.
bool HasHandlerQueues(pg::SpiSession& spi);

// ---- Completions counted (finished.cpp): pgq.finished, one row per queue
// and maintenance pass (or per completing statement without preload).

// Writes `jobs` completions of `queue_id` at `now` (a queue dropped
// meanwhile gets none).
void FlushFinished(pg::SpiSession& spi, int32 queue_id, TimestampTz now, int64 jobs);
// Drops up to `limit` rows of `queue_id` older than `before`.
struct FinishedDropped {
  int64 rows;
  int64 jobs;
};
FinishedDropped DropOldFinished(pg::SpiSession& spi, int32 queue_id, TimestampTz before,
                                int32 limit);
// Forgets the completions of queue `queue_id` (dropped).
void ForgetFinished(pg::SpiSession& spi, int32 queue_id);

}  // namespace pgq::store
