// pgq.enqueue and pgq.enqueue_many: jobs are written in the caller's
// transaction, so a job exists if and only if the business write committed.
#include <algorithm>
#include <optional>
#include <unordered_map>
#include <vector>

#include "service/queue_ref.h"
#include "service/rights.h"
#include "core/validate.h"
#include "pg/allocator.h"
#include "pg/args.h"
#include "pg/invalidation.h"
#include "pg/queue_cache.h"
#include "service/backpressure.h"
#include "pg/queue_lock.h"
#include "pg/settings.h"
#include "pg/trace_context.h"
#include "store/jobs.h"
#include "store/queues.h"

namespace pgq::api {

namespace {

// Enqueue races with a concurrent complete of the job holding the dedupe key:
// the insert conflicts, then the holder is gone before we look. Each retry
// needs that race to happen again, so a few tries always suffice in practice.
constexpr int kDedupeTries = 8;

// Infinite times mean nothing for a job, and every reader that subtracts one
// (queue_stats' oldest_ready_age) would fail on it: refused (issue 15, M3).
TimestampTz RunAtArg(FunctionCallInfo fcinfo, int index) {
  if (pg::ArgIsNull(fcinfo, index)) return GetCurrentTransactionStartTimestamp();
  const TimestampTz run_at = PG_GETARG_TIMESTAMPTZ(index);
  if (TIMESTAMP_NOT_FINITE(run_at)) {
    pg::Raise(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE, "run_at must be a finite timestamp", "",
              "Leave run_at NULL (or now()) for a job that is due at once.");
  }
  return run_at;
}

int32 PriorityArg(FunctionCallInfo fcinfo, int index) {
  return pg::ArgIsNull(fcinfo, index) ? 0 : PG_GETARG_INT32(index);
}

// Keys of the claim order: the lowest int4 has no negation (jobs_ready_idx
// orders by - priority).
int32 CheckedPriority(FunctionCallInfo fcinfo, int index) {
  const int32 priority = PriorityArg(fcinfo, index);
  if (priority == PG_INT32_MIN) {
    pg::Raise(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE, "priority must be between " +
                                                      std::to_string(PG_INT32_MIN + 1) + " and " +
                                                      std::to_string(PG_INT32_MAX));
  }
  return priority;
}

// The queue named `name`, locked in share mode until the end of the
// transaction, with settings no older than the lock.
pg::CachedQueue LockQueueForEnqueue(pg::SpiSession& spi, std::string_view name) {
  for (;;) {
    // Read before the look-up: a change processed while it read the row
    // counts too.
    const uint64 begun = pg::QueueCache::Begin();
    const pg::CachedQueue queue = service::CachedOrFoundQueue(spi, name);
    pg::LockQueueShared(queue.id);
    // A drop or change that committed before we got the lock is seen now.
    if (pg::QueueCache::StillAt(begun)) return queue;
  }
}

// The first job with a dedupe_for in a queue marks it: from then on its
// enqueues with a dedupe key look at the keys held past their jobs
// (store/keys.cpp), which costs the others nothing until then. The mark
// commits with that job, so before any such job can finish and hold a key.
void MarkDedupePeriods(pg::SpiSession& spi, int32 queue_id) {
  store::MarkDedupePeriods(spi, queue_id);
  pg::invalidation::Announce(pg::invalidation::kQueues);  // every backend's cached queue learns it
}

// The first enqueue with on_duplicate => 'replace' in a queue marks it: its
// jobs with a dedupe key are rows from then on, where a replace finds a
// pending holder by an index (store/ring_jobs.h TakesKeyed).
void MarkDedupeReplaces(pg::SpiSession& spi, int32 queue_id) {
  store::MarkDedupeReplaces(spi, queue_id);
  pg::invalidation::Announce(pg::invalidation::kQueues);
}

// on_duplicate: 'ignore' (the holder's id, as in 1.1) or 'replace'.
bool ReplacesDuplicate(FunctionCallInfo fcinfo, int index, bool has_dedupe) {
  const std::string_view value = pg::RequiredText(fcinfo, index, "on_duplicate");
  if (value == "ignore") return false;
  if (value != "replace") {
    pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE,
              "unknown on_duplicate \"" + std::string(value) + "\"", {},
              "Use 'ignore' (return the holder's id) or 'replace' (give the holder the new job).");
  }
  if (!has_dedupe) {
    pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE, "on_duplicate 'replace' needs a dedupe_key");
  }
  return true;
}

// after: the ids a job waits for, sorted and distinct; nullopt when NULL or
// empty (no dependencies).
std::optional<std::vector<int64>> AfterArg(FunctionCallInfo fcinfo, int index) {
  if (pg::ArgIsNull(fcinfo, index)) return std::nullopt;
  ArrayType* array = pg::Guard([&] { return PG_GETARG_ARRAYTYPE_P(index); });
  if (ARR_NDIM(array) > 1) {
    pg::Raise(ERRCODE_ARRAY_SUBSCRIPT_ERROR, "after must be a one-dimensional array");
  }
  Datum* elements = nullptr;
  bool* nulls = nullptr;
  int count = 0;
  pg::Guard([&] {
    deconstruct_array(array, INT8OID, sizeof(int64), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &elements,
                      &nulls, &count);
  });
  if (count > core::kMaxParents) {
    pg::Raise(ERRCODE_PROGRAM_LIMIT_EXCEEDED,
              "after may name at most " + std::to_string(core::kMaxParents) + " jobs",
              "It names " + std::to_string(count) + ".",
              "For a larger fan-in, make an intermediate job wait for each part, and the last "
              "job wait for those.");
  }
  if (count == 0) return std::nullopt;
  std::vector<int64> ids;
  ids.reserve(count);
  for (int i = 0; i < count; ++i) {
    if (nulls[i]) {
      pg::Raise(ERRCODE_NULL_VALUE_NOT_ALLOWED,
                "job id at position " + std::to_string(i + 1) + " of after must not be null");
    }
    ids.push_back(DatumGetInt64(elements[i]));
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

// The live jobs among `after`, locked until the transaction ends (a right
// on each one's queue: any of produce, consume, admin); raises when one is
// unknown (23503, as a foreign key would), dead (55000) or waits behind a
// running duplicate (0A000). Cycles cannot be made: every parent exists
// before its child. `links`: the traced parents' traceparents, distinct
// and sorted, at most core::kMaxTraceLinks (text[]; 0: none) — the
// child's trace links (ADR 0030).
std::vector<int64> LockedParents(pg::SpiSession& spi, const std::vector<int64>& after,
                                 Datum* links) {
  const store::Scope scope = service::QueuesWithRight(spi, core::kAllRights);
  store::Parents parents = store::LockParents(spi, scope, after);
  if (parents.unknown != 0) {
    pg::Raise(ERRCODE_FOREIGN_KEY_VIOLATION,
              "job " + std::to_string(parents.unknown) + " named in after does not exist",
              "A job of a queue you hold no right on is answered so whatever its state, and "
              "so is a job that completed without a trace unless you hold a right on every "
              "queue.",
              "A job can wait only for jobs of queues you hold a right on: live, or done and "
              "kept by their queue (keep_completed).");
  }
  if (parents.dead != 0) {
    pg::Raise(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
              "job " + std::to_string(parents.dead) + " named in after is dead",
              "It is in pgq.dead_jobs (it failed, expired or was cancelled): it will never be "
              "done.",
              "Retry it with pgq.retry_dead first, or leave it out.");
  }
  *links = pg::TraceLinks(std::move(parents.traceparents));
  if (parents.following != 0) {
    pg::Raise(ERRCODE_FEATURE_NOT_SUPPORTED,
              "job " + std::to_string(parents.following) +
                  " named in after waits behind a running job with its dedupe_key",
              "Such a job (enqueued with on_duplicate => 'replace') cannot be waited for yet.");
  }
  return std::move(parents.live);
}

// How enqueue treats a job, decided once per call.
struct EnqueueHow {
  bool has_max_attempts;  // else the queue's max_attempts
  bool has_period;        // a dedupe_for was given
  bool replace;           // on_duplicate => 'replace'
  bool reserved = false;  // the caller reserved its room under max_pending
};

// One job into queue `name`: its id, or, its dedupe key taken, the key's
// holder's. `after` (nullptr: none): the parents, locked into `parents`
// (job.parents set to them) once the queue's lock and the right are
// taken, in that order, on the first try; already locked: `after` nullptr
// and job.parents set by the caller.
int64 EnqueueOne(pg::SpiSession& spi, std::string_view name, store::NewJob& job,
                 const EnqueueHow& how, const std::vector<int64>* after,
                 std::vector<int64>* parents) {
  const bool has_dedupe = job.dedupe_key != 0;
  for (int tries = 0; tries < kDedupeTries; ++tries) {
    // Locked on every try: a try that found the key's holder gone may mean
    // the queue was dropped meanwhile, and then this raises undefined_object.
    const pg::CachedQueue queue = LockQueueForEnqueue(spi, name);
    service::RequireRight(spi, queue.id, name, core::kProduce);
    // Room under max_pending, once: a dedupe key's holder returned instead
    // keeps it until the end of the transaction (refused early, never late).
    if (tries == 0 && !how.reserved)
      service::ReserveRoom(spi, queue.id, name, queue.max_pending, 1);
    if (after != nullptr && tries == 0) {
      *parents = LockedParents(spi, *after, &job.trace_links);
      job.parents = parents;
    }
    if (!how.has_max_attempts) job.max_attempts = queue.max_attempts;
    if (how.has_period && !queue.dedupe_periods) MarkDedupePeriods(spi, queue.id);
    if (how.replace && !queue.dedupe_replaces) MarkDedupeReplaces(spi, queue.id);
    const store::Queue target{queue.id,
                              name,
                              queue.notify,
                              how.has_period || queue.dedupe_periods,
                              queue.group_concurrency,
                              queue.ring_id,
                              queue.max_attempts,
                              how.replace || queue.dedupe_replaces};
    const std::optional<int64> id =
        how.replace ? store::Replace(spi, target, job) : store::Insert(spi, target, job);
    if (id) return *id;
    // Nothing inserted: only a taken dedupe key skips the row.
    if (!has_dedupe) pg::Raise(ERRCODE_INTERNAL_ERROR, "enqueue inserted no row");
    // A live holder that appeared meanwhile is replaced on the next try.
    if (how.replace && store::KeyHolder(spi, queue.id, job.dedupe_key, pg::Now(), true) != 0) {
      continue;
    }
    if (const int64 holder = store::KeyHolder(spi, queue.id, job.dedupe_key, pg::Now());
        holder != 0) {
      return holder;
    }
  }
  pg::Raise(ERRCODE_T_R_SERIALIZATION_FAILURE,
            "could not enqueue with dedupe_key: its holder kept changing",
            "The job holding the key finished between our insert and our lookup " +
                std::to_string(kDedupeTries) + " times.",
            "Retry the transaction.");
}

}  // namespace

}  // namespace pgq::api

using namespace pgq;

// enqueue(queue, payload, run_at, priority, dedupe_key, max_attempts, group_key,
//         dedupe_for, on_duplicate, after, traceparent, tracestate)
PGQ_FUNCTION(pgq_enqueue) {
  const std::string_view name = pg::QueueNameArg(fcinfo, 0);
  const Datum payload = pg::RequiredPayload(fcinfo, 1);
  const TimestampTz run_at = api::RunAtArg(fcinfo, 2);
  const int32 priority = api::CheckedPriority(fcinfo, 3);
  const bool has_dedupe = !pg::ArgIsNull(fcinfo, 4);
  if (has_dedupe) {
    const std::string_view key = pg::RequiredText(fcinfo, 4, "dedupe_key");
    if (!core::IsValidDedupeKey(key)) {
      pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE,
                "dedupe_key must be 1 to " + std::to_string(core::kMaxDedupeKeyBytes) + " bytes",
                "It is " + std::to_string(key.size()) + " bytes.",
                "Use a hash of a longer key, for example md5(key).");
    }
  }
  const bool has_max_attempts = !pg::ArgIsNull(fcinfo, 5);
  if (has_max_attempts && !core::IsValidMaxAttempts(PG_GETARG_INT32(5))) {
    pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE,
              "max_attempts must be between 1 and " + std::to_string(core::kMaxAttemptsLimit));
  }
  const bool has_group = !pg::ArgIsNull(fcinfo, 6);
  std::string_view group;
  if (has_group) {
    group = pg::RequiredText(fcinfo, 6, "group_key");
    if (!core::IsValidKey(group)) {
      pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE,
                "group_key must be 1 to " + std::to_string(core::kMaxKeyBytes) + " bytes",
                "It is " + std::to_string(group.size()) + " bytes.",
                "Use a hash of a longer key, for example md5(key).");
    }
  }
  const bool has_period = !pg::ArgIsNull(fcinfo, 7);
  if (has_period) {
    pg::SpanMicros(PG_GETARG_INTERVAL_P(7), "dedupe_for");
    if (!has_dedupe) {
      pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE, "dedupe_for needs a dedupe_key", {},
                "dedupe_for says how long the job's dedupe_key stays taken after it finished.");
    }
  }
  const bool replace = api::ReplacesDuplicate(fcinfo, 8, has_dedupe);
  const std::optional<std::vector<int64>> after = api::AfterArg(fcinfo, 9);
  if (after && replace) {
    pg::Raise(ERRCODE_FEATURE_NOT_SUPPORTED, "after cannot be combined with on_duplicate 'replace'",
              "A job that replaces its key's holder takes the holder's place, not new parents.");
  }
  const Datum trace_context = pg::TraceContextArg(fcinfo, 10);

  pg::SpiSession spi;
  store::NewJob job{payload,
                    run_at,
                    priority,
                    has_max_attempts ? PG_GETARG_INT32(5) : 0,
                    has_dedupe ? PG_GETARG_DATUM(4) : static_cast<Datum>(0),
                    has_group ? PG_GETARG_DATUM(6) : static_cast<Datum>(0),
                    group,
                    has_period ? PG_GETARG_DATUM(7) : static_cast<Datum>(0)};
  job.trace_context = trace_context;
  std::vector<int64> parents;
  PG_RETURN_INT64(api::EnqueueOne(spi, name, job, {has_max_attempts, has_period, replace},
                                  after ? &*after : nullptr, &parents));
}

// enqueue_many(queue, payloads, run_at, priority, after, group_keys,
// dedupe_keys, traceparent, tracestate): ids in input order.
PGQ_FUNCTION(pgq_enqueue_many) {
  const std::string_view name = pg::QueueNameArg(fcinfo, 0);
  if (pg::ArgIsNull(fcinfo, 1)) {
    pg::Raise(ERRCODE_NULL_VALUE_NOT_ALLOWED, "payloads must not be null");
  }
  const TimestampTz run_at = api::RunAtArg(fcinfo, 2);
  const int32 priority = api::CheckedPriority(fcinfo, 3);
  const std::optional<std::vector<int64>> after = api::AfterArg(fcinfo, 4);
  const pg::PayloadArray payload_array = pg::PayloadsArg(fcinfo, 1);
  ArrayType* payloads = payload_array.array;
  const int count = payload_array.count;
  const std::vector<Datum> group_keys =
      pg::KeysForJobsArg(fcinfo, 5, count, "group_keys", core::kMaxKeyBytes);
  const std::vector<Datum> dedupe_keys =
      pg::KeysForJobsArg(fcinfo, 6, count, "dedupe_keys", core::kMaxDedupeKeyBytes);
  const Datum trace_context = pg::TraceContextArg(fcinfo, 7);

  ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
  pg::Guard([&] { InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC); });
  // Ids are copied out of SPI's memory into the per-query context before
  // SPI_finish, in input order.
  auto ids = pg::MakeSmallVector<int64, 128>(rsinfo->econtext->ecxt_per_query_memory);
  {
    pg::SpiSession spi;
    const service::QueueRef queue = service::FindQueueWithRight(spi, name, core::kProduce);
    if (count == 0) return static_cast<Datum>(0);
    pg::LockQueueShared(queue.id);
    // The whole call's room, or nothing of it (53400).
    service::ReserveRoom(spi, queue.id, name, queue.max_pending, count);
    std::vector<int64> parents;
    Datum trace_links = 0;
    if (after) parents = api::LockedParents(spi, *after, &trace_links);
    if (!group_keys.empty() || !dedupe_keys.empty()) {
      // Jobs with keys, one at a time as enqueue makes them (a group's
      // room under its lock, a taken key answered with its holder's id),
      // in input order; ids in that order, a holder's where its key was
      // taken (by an earlier payload of the same call too). A group's room
      // is counted once for the call (store::GroupRoom): a tenant's import
      // of n jobs costs n inserts, not a count as deep as its group each.
      std::unordered_map<std::string_view, store::GroupRoom> rooms;
      for (int i = 0; i < count; ++i) {
        const Datum group_key = group_keys.empty() ? 0 : group_keys[static_cast<size_t>(i)];
        std::string_view group;
        if (group_key != 0) {
          const text* key = reinterpret_cast<const text*>(DatumGetPointer(group_key));
          group = std::string_view(VARDATA_ANY(key), VARSIZE_ANY_EXHDR(key));
        }
        store::NewJob job{payload_array.elements[i],
                          run_at,
                          priority,
                          0,
                          dedupe_keys.empty() ? 0 : dedupe_keys[static_cast<size_t>(i)],
                          group_key,
                          group,
                          0};
        job.trace_context = trace_context;
        job.trace_links = trace_links;
        if (after) job.parents = &parents;
        if (group_key != 0) job.room = &rooms[group];
        ids.push_back(
            api::EnqueueOne(spi, name, job, {false, false, false, true}, nullptr, nullptr));
      }
    } else {
      const pg::Result inserted = store::InsertMany(
          spi, {queue.id, name, queue.notify, false, 1, queue.ring_id, queue.max_attempts},
          PointerGetDatum(payloads), run_at, priority, &parents, trace_context, trace_links);
      if (inserted.empty()) service::RaiseUnknownQueue(name);
      ids.reserve(inserted.size());
      const int id_column = inserted.ColumnNumber("id");
      for (uint64 row = 0; row < inserted.size(); ++row)
        ids.push_back(inserted.Int64(row, id_column));
      // Drawn in input order from one sequence: sorted, they are in it.
      std::sort(ids.begin(), ids.end());
    }
  }
  for (const int64 id : ids) {
    Datum value = Int64GetDatum(id);
    bool is_null = false;
    pg::Guard([&] { tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, &value, &is_null); });
  }
  return static_cast<Datum>(0);
}
