// Every new job: enqueue, enqueue_many, publish, schedules and retry_dead
// all insert through InsertJobsSql's one column list and announce through
// AfterInsert.
#include <algorithm>

#include "pg/allocator.h"
#include "pg/args.h"
#include "pg/ledger.h"
#include "pg/queue_lock.h"
#include "pg/row_insert.h"
#include "pg/settings.h"
#include "store/catalog.h"
#include "store/ring_jobs.h"

extern "C" {
#include "access/htup_details.h"
#include "commands/sequence.h"
#include "utils/memutils.h"
}
#include "store/internal.h"

namespace pgq::store {

namespace internal {

std::string InsertJobsSql(std::string_view before, std::string_view rows, std::string_view conflict,
                          std::string_view extra_columns) {
  std::string sql(before);
  sql += R"sql(
INSERT INTO pgq.job_rows (id, queue_id, state, priority, run_at, attempt, max_attempts,
                      enqueued_at, dedupe_key, group_key, last_error, payload)sql";
  sql += extra_columns;
  sql += ", trace_context, trace_links)\n";
  sql += rows;
  sql += conflict;
  sql += R"sql(
RETURNING queue_id, id, priority, run_at, state = 'p' AS pending, group_key)sql";
  return sql;
}

KeyColumns::KeyColumns(const pg::Result& rows)
    : priority(rows.ColumnNumber("priority")),
      run_at(rows.ColumnNumber("run_at")),
      id(rows.ColumnNumber("id")) {}

core::ClaimKey KeyColumns::Of(const pg::Result& rows, uint64 row) const {
  bool is_null = false;
  return core::ClaimKey{rows.Int32(row, priority),
                        DatumGetTimestampTz(rows.Value(row, run_at, &is_null)),
                        rows.Int64(row, id)};
}

core::ClaimKey ClaimKeyOf(const pg::Result& rows, uint64 row) {
  return KeyColumns(rows).Of(rows, row);
}

namespace {

// NOTIFY is sent at commit, like the wake-ups; payload: the queue's name.
pg::Statement notify_queue = {"SELECT pg_catalog.pg_notify('pgq', $1)", 1, {TEXTOID}, nullptr};

}  // namespace

void AfterInsert(pg::SpiSession& spi, const Queue* queues, int count, const pg::Result& rows) {
  if (rows.empty()) return;
  const int queue_column = rows.ColumnNumber("queue_id");
  const int pending_column = rows.ColumnNumber("pending");
  const KeyColumns key_columns(rows);
  for (int q = 0; q < count; ++q) {
    const Queue& queue = queues[q];
    bool any = false;
    core::ClaimKey first = core::kFirstKey;
    for (uint64 row = 0; row < rows.size(); ++row) {
      // A job waiting behind its group's head becomes pending later (groups.cpp).
      if (rows.Int32(row, queue_column) != queue.id || !rows.Bool(row, pending_column)) continue;
      const core::ClaimKey key = key_columns.Of(rows, row);
      first = any ? core::EarlierKey(first, key) : key;
      any = true;
    }
    if (any) AnnounceJobs(spi, queue, first);
  }
}

void AnnounceJobs(pg::SpiSession& spi, const Queue& queue, const core::ClaimKey& first) {
  pg::ledger::NotePending(queue.id, first, true);
  NotifyListeners(spi, queue);
}

void NotifyListeners(pg::SpiSession& spi, const Queue& queue) {
  if (!queue.notify) return;
  pg::Params params;
  params.Set(0, pg::TextDatum(queue.name));
  spi.Execute(notify_queue, params);
}

}  // namespace internal

namespace {

using internal::BuiltStatement;
using internal::InsertJobsSql;

// $1 queue id, $2 payload, $3 run_at, $4 priority, $5 dedupe key, $6
// max_attempts, $7 group key; $12 the trace context (SetJobParams; $8 the
// dedupe period, $9-$11 what some statements add).
std::string OneJob(std::string_view state) {
  return "VALUES (pg_catalog.nextval('pgq.job_id_seq'), $1, " + std::string(state) +
         ", $4, $3, 0, $6, pg_catalog.now(), $5, $7, NULL, $2, $12, NULL)";
}

// Enqueue's after: a job that waits for its parents ('b'), with how many
// ($10), its dedupe period ($8), its id ($11: drawn by the caller, with
// its key's row when it has one) and its parents' traceparents ($13). It
// is in no group's line until they are done (dependencies.cpp).
constexpr std::string_view kWaitingJob = R"sql(
VALUES ($11, $1, 'b', $4, $3, 0, $6, pg_catalog.now(), $5, $7, NULL, $2, $8, $10, $12, $13))sql";

// A job of a FIFO group waits ('w') while its group has any other job; the
// caller of Insert holds the group's lock, so that check and the promotion
// of the next job when the head leaves (groups.cpp) never race. Jobs
// without a group get statements without the check: its subplan would be
// set up on every execution even where it never runs. A job waiting for its
// parents ('b') is not in its group's line yet.
constexpr std::string_view kGroupState = R"sql(
  CASE WHEN EXISTS (SELECT 1 FROM pgq.job_rows g WHERE g.queue_id = $1 AND g.group_key = $7
                                             AND g.state <> 'b')
         OR EXISTS (SELECT 1 FROM pgq.group_holds h WHERE h.queue_id = $1 AND h.group_key = $7)
       THEN 'w' ELSE 'p' END)sql";

// With a group_concurrency above 1 the group's first that many jobs are
// pending or running, the rest wait: a new job waits if there are already
// that many.
constexpr std::string_view kSharedGroupState = R"sql(
  CASE WHEN (SELECT count(*) FROM (
               SELECT FROM pgq.job_rows g WHERE g.queue_id = $1 AND g.group_key = $7 AND g.state <> 'b'
                LIMIT (SELECT q.group_concurrency FROM pgq.queues q WHERE q.queue_id = $1)) s)
          + (SELECT count(*) FROM (
               SELECT FROM pgq.group_holds h WHERE h.queue_id = $1 AND h.group_key = $7
                LIMIT (SELECT q.group_concurrency FROM pgq.queues q WHERE q.queue_id = $1)) s)
            >= (SELECT q.group_concurrency FROM pgq.queues q WHERE q.queue_id = $1)
       THEN 'w' ELSE 'p' END)sql";

// How a new job's state is chosen.
enum GroupKind { kNoGroup, kFifoGroup, kSharedGroup };

GroupKind GroupOf(const Queue& queue, const NewJob& job) {
  if (job.group_key == 0) return kNoGroup;
  return queue.group_concurrency > 1 ? kSharedGroup : kFifoGroup;
}

constexpr std::string_view kStateOf[] = {"'p'", kGroupState, kSharedGroupState};

constexpr Oid kOneJobArgs[] = {INT4OID, JSONBOID,    TIMESTAMPTZOID, INT4OID, TEXTOID, INT4OID,
                               TEXTOID, INTERVALOID, INT4OID,        INT4OID, INT4OID, TEXTOID};

// [GroupKind]
pg::Statement& InsertOne(GroupKind group) {
  static BuiltStatement statements[3] = {
      {InsertJobsSql({}, OneJob(kStateOf[kNoGroup])), kOneJobArgs},
      {InsertJobsSql({}, OneJob(kStateOf[kFifoGroup])), kOneJobArgs},
      {InsertJobsSql({}, OneJob(kStateOf[kSharedGroup])), kOneJobArgs},
  };
  return statements[group].get();
}

// A job with a dedupe key, whose key's row (TakeKey) drew its id: $8
// dedupe_for, $9 the id.
std::string KeyedJob(std::string_view state) {
  return "VALUES ($9, $1, " + std::string(state) +
         ", $4, $3, 0, $6, pg_catalog.now(), $5, $7, NULL, $2, $8, $12, NULL)";
}

constexpr Oid kKeyedJobArgs[] = {INT4OID, JSONBOID,    TIMESTAMPTZOID, INT4OID, TEXTOID, INT4OID,
                                 TEXTOID, INTERVALOID, INT8OID,        INT4OID, INT4OID, TEXTOID};

// [GroupKind]
pg::Statement& InsertKeyed(GroupKind group) {
  static BuiltStatement statements[3] = {
      {InsertJobsSql({}, KeyedJob(kStateOf[kNoGroup]), {}, ", dedupe_for"), kKeyedJobArgs},
      {InsertJobsSql({}, KeyedJob(kStateOf[kFifoGroup]), {}, ", dedupe_for"), kKeyedJobArgs},
      {InsertJobsSql({}, KeyedJob(kStateOf[kSharedGroup]), {}, ", dedupe_for"), kKeyedJobArgs},
  };
  return statements[group].get();
}

constexpr Oid kWaitingJobArgs[] = {INT4OID, JSONBOID, TIMESTAMPTZOID, INT4OID,        TEXTOID,
                                   INT4OID, TEXTOID,  INTERVALOID,    TIMESTAMPTZOID, INT4OID,
                                   INT8OID, TEXTOID,  TEXTARRAYOID};

pg::Statement& insert_waiting() {
  static BuiltStatement statement{InsertJobsSql({}, kWaitingJob, {}, ", dedupe_for, open_parents"),
                                  kWaitingJobArgs};
  return statement.get();
}

// $1 queue id, $2 payloads, $3 run_at, $4 priority, $5 the trace context.
// Ids are drawn in input order: volatile functions in the target list are
// evaluated after the ORDER BY of their own query level. No row if the
// queue is gone.
pg::Statement& insert_many() {
  static BuiltStatement statement{InsertJobsSql({}, R"sql(
SELECT s.id, q.queue_id, 'p', $4, $3, 0, q.max_attempts, pg_catalog.now(), NULL, NULL, NULL,
       s.payload, $5, NULL
  FROM pgq.queues q,
       (SELECT pg_catalog.nextval('pgq.job_id_seq') AS id, p.payload
          FROM pg_catalog.unnest($2) WITH ORDINALITY AS p(payload, ord)
         ORDER BY p.ord) s
 WHERE q.queue_id = $1)sql"),
                                  {INT4OID, JSONBARRAYOID, TIMESTAMPTZOID, INT4OID, TEXTOID}};
  return statement.get();
}

// The same, every job waiting for $6 parents (enqueue_many's after), $7
// their traceparents.
pg::Statement& insert_many_waiting() {
  static BuiltStatement statement{
      InsertJobsSql({}, R"sql(
SELECT s.id, q.queue_id, 'b', $4, $3, 0, q.max_attempts, pg_catalog.now(), NULL, NULL, NULL,
       s.payload, $6, $5, $7
  FROM pgq.queues q,
       (SELECT pg_catalog.nextval('pgq.job_id_seq') AS id, p.payload
          FROM pg_catalog.unnest($2) WITH ORDINALITY AS p(payload, ord)
         ORDER BY p.ord) s
 WHERE q.queue_id = $1)sql",
                    {}, ", open_parents"),
      {INT4OID, JSONBARRAYOID, TIMESTAMPTZOID, INT4OID, TEXTOID, INT4OID, TEXTARRAYOID}};
  return statement.get();
}

// $1 event id, $2 topic, $3 payload, $4 run_at, $5 queue ids, $6 the
// publisher's trace context. The job's payload carries the event's
// identity, so a handler can tell a retry from a new event.
pg::Statement& insert_event() {
  static BuiltStatement statement{
      InsertJobsSql({}, R"sql(
SELECT pg_catalog.nextval('pgq.job_id_seq'), q.queue_id, 'p', 0, $4, 0, q.max_attempts,
       pg_catalog.now(), NULL, NULL, NULL,
       pg_catalog.jsonb_build_object('event_id', $1::bigint, 'topic', $2::text,
                                     'payload', $3::jsonb), $6, NULL
  FROM pgq.queues q WHERE q.queue_id = ANY ($5) ORDER BY q.queue_id)sql"),
      {INT8OID, TEXTOID, JSONBOID, TIMESTAMPTZOID, INT4ARRAYOID, TEXTOID}};
  return statement.get();
}

// The same event's subscriber queues for jobs that join a FIFO group (the
// parameters of insert_event, then $6 the group key): each still existing
// queue's settings and the envelope, which names the group too (a relay
// sends it on; pgq.claimed_job has no group column), by queue id ($4
// unused).
pg::Statement grouped_event_targets = {
    R"sql(
SELECT q.queue_id, q.max_attempts, q.group_concurrency, q.dedupe_periods,
       pg_catalog.jsonb_build_object('event_id', $1::bigint, 'topic', $2::text,
                                     'payload', $3::jsonb, 'group_key', $6::text) AS payload
  FROM pgq.queues q WHERE q.queue_id = ANY ($5) ORDER BY q.queue_id)sql",
    6,
    {INT8OID, TEXTOID, JSONBOID, TIMESTAMPTZOID, INT4ARRAYOID, TEXTOID},
    nullptr};

// Most jobs have neither a dedupe key nor parents: their row is built here
// and inserted without an INSERT statement (pg/row_insert.h), which is a
// third of what such an enqueue costs. The columns not set are NULL. The
// row is pending (announced to the claim hints), or, `state` 'w', waiting
// behind its group's head (the caller holds the group's lock and found no
// room: Insert's grouped path).
// `id`: drawn with its dedupe key's row (0: none, drawn here).
int64 InsertPlain(pg::SpiSession& spi, const Queue& queue, const NewJob& job,
                  const Catalog& catalog, char state = 'p', int64 id = 0) {
  pg::RequireInsertAllowed();  // before the id is drawn, as an INSERT would
  internal::JobRow row;
  row.id = id != 0 ? id : pg::Guard([&] { return nextval_internal(catalog.job_id_seq, false); });
  row.queue_id = queue.id;
  row.priority = job.priority;
  row.run_at = job.run_at;
  row.attempt = 0;
  row.max_attempts = job.max_attempts;
  row.enqueued_at = GetCurrentTransactionStartTimestamp();
  row.payload = job.payload;
  row.state = state;
  row.group_key = job.group_key;
  row.dedupe_key = job.dedupe_key;
  row.dedupe_for = job.dedupe_for;
  row.trace_context = job.trace_context;
  internal::InsertJobRow(catalog, row);
  if (state == 'p') {
    internal::AnnounceJobs(spi, queue, core::ClaimKey{job.priority, job.run_at, row.id});
  }
  return row.id;
}

// A job with parents: waiting, then its rows in pgq.job_dependencies. Not
// in its group's line yet, so no group lock; not pending, so nothing to
// announce. `id`: drawn with its key's row (0: none, drawn here).
int64 InsertWaiting(pg::SpiSession& spi, const Queue& queue, const NewJob& job, int64 id,
                    const Catalog& catalog) {
  if (id == 0) {
    pg::RequireInsertAllowed();
    id = pg::Guard([&] { return nextval_internal(catalog.job_id_seq, false); });
  }
  pg::Params params;
  internal::SetJobParams(params, queue, job)
      .Set(8, TimestampTzGetDatum(pg::Now()))
      .Set(9, Int32GetDatum(static_cast<int32>(job.parents->size())))
      .Set(10, Int64GetDatum(id))
      .SetOptional(12, job.trace_links == 0, job.trace_links);
  (void)spi.Execute(insert_waiting(), params);
  internal::AddDependencies(spi, *job.parents, {id});
  return id;
}

// A job with a dedupe key: the key's row first (pgq.dedupe_holds, the one
// place a key is taken), which draws the job's id; then the job, on the
// queue's ring when it is due now with no parents (a grouped one if its
// group has room, held in it as Insert's grouped jobs are; ADR 0028,
// "Dedupe keys on the rings"), else a row of pgq.job_rows. nullopt: the
// key is taken.
std::optional<int64> InsertKeyedJob(pg::SpiSession& spi, const Queue& queue, const NewJob& job,
                                    const Catalog& catalog) {
  const TimestampTz now = pg::Now();
  pg::RequireInsertAllowed();
  const int64 id = internal::TakeKey(spi, queue, job.dedupe_key, now);
  if (id == 0) return std::nullopt;
  if (job.parents != nullptr && !job.parents->empty()) {
    return InsertWaiting(spi, queue, job, id, catalog);
  }
  if (ring::TakesKeyed(queue, job, now) && job.group_key == 0) {
    int64 placed = id;
    if (ring::Enqueue(spi, queue, &job.payload, 1, job.max_attempts, job.priority, job.run_at,
                      &placed, 0, job.dedupe_key, job.dedupe_for, job.trace_context)) {
      return id;
    }
  } else if (ring::TakesKeyed(queue, job, now) && internal::CanInsertJobRow(catalog)) {
    pg::LockGroup(queue.id, job.group);
    const bool room = internal::TakeGroupRoom(spi, queue, job.group_key, job.room);
    int64 placed = id;
    if (room &&
        ring::Enqueue(spi, queue, &job.payload, 1, job.max_attempts, job.priority, job.run_at,
                      &placed, job.group_key, job.dedupe_key, job.dedupe_for, job.trace_context)) {
      internal::HoldGroup(spi, queue.id, job.group_key, id);
      return id;
    }
    return InsertPlain(spi, queue, job, catalog, room ? 'p' : 'w', id);
  }
  if (job.group_key != 0) pg::LockGroup(queue.id, job.group);
  pg::Params params;
  internal::SetJobParams(params, queue, job).Set(8, Int64GetDatum(id));
  const pg::Result inserted = spi.Execute(InsertKeyed(GroupOf(queue, job)), params);
  internal::AfterInsert(spi, &queue, 1, inserted);
  return id;
}

}  // namespace

namespace {

// enqueue_many onto the queue's ring: rows of one column, "id".
// Empty with *placed false when the queue could have no lane: the caller
// inserts them into pgq.job_rows.
pg::Result InsertManyOnRing(pg::SpiSession& spi, const Queue& queue, Datum payloads, int32 priority,
                            TimestampTz run_at, Datum trace_context, bool* placed) {
  Datum* elems = nullptr;
  bool* nulls = nullptr;
  int count = 0;
  pg::Guard([&] {
    deconstruct_array(DatumGetArrayTypeP(payloads), JSONBOID, -1, false, TYPALIGN_INT, &elems,
                      &nulls, &count);
  });
  *placed = true;
  if (count == 0) return pg::Result();
  std::vector<int64> ids(static_cast<size_t>(count));
  *placed = ring::Enqueue(spi, queue, elems, count, queue.max_attempts, priority, run_at,
                          ids.data(), 0, 0, 0, trace_context);
  if (!*placed) return pg::Result();
  static TupleDesc desc = pg::Result::Describe({{"id", INT8OID}});
  HeapTuple* tuples = pg::Guard([&] {
    HeapTuple* made = static_cast<HeapTuple*>(palloc(sizeof(HeapTuple) * count));
    for (int i = 0; i < count; ++i) {
      Datum value = Int64GetDatum(ids[i]);
      bool is_null = false;
      made[i] = heap_form_tuple(desc, &value, &is_null);
    }
    return made;
  });
  return pg::Result::Rows(desc, tuples, static_cast<uint64>(count));
}

// Insert's job, not yet noted as unfinished.
std::optional<int64> InsertJob(pg::SpiSession& spi, const Queue& queue, const NewJob& job) {
  const Catalog& catalog = InstalledCatalog();
  if (job.dedupe_key != 0) return InsertKeyedJob(spi, queue, job, catalog);
  const bool has_group = job.group_key != 0;
  if (job.parents != nullptr && !job.parents->empty()) {
    return InsertWaiting(spi, queue, job, 0, catalog);
  }
  if (queue.ring_id != 0) {
    const TimestampTz now = pg::Now();
    int64 id = 0;
    if (ring::Takes(queue, job, now) &&
        ring::Enqueue(spi, queue, &job.payload, 1, job.max_attempts, job.priority, job.run_at, &id,
                      0, 0, 0, job.trace_context)) {
      return id;
    }
    // A grouped job whose group has room goes on the ring too, counted in
    // its group by a hold (ADR 0028, "Groups on the rings"); one that must
    // wait for its group waits in pgq.job_rows (so does one the ring did
    // not take: pending there).
    if (ring::TakesGrouped(queue, job, now) && internal::CanInsertJobRow(catalog)) {
      pg::LockGroup(queue.id, job.group);
      const bool room = internal::TakeGroupRoom(spi, queue, job.group_key, job.room);
      if (room && ring::Enqueue(spi, queue, &job.payload, 1, job.max_attempts, job.priority,
                                job.run_at, &id, job.group_key, 0, 0, job.trace_context)) {
        internal::HoldGroup(spi, queue.id, job.group_key, id);
        return id;
      }
      return InsertPlain(spi, queue, job, catalog, room ? 'p' : 'w');
    }
  }
  if (!has_group && internal::CanInsertJobRow(catalog)) {
    return InsertPlain(spi, queue, job, catalog);
  }
  // A grouped job that stays a row (due later, or its queue has no ring):
  // its group's room counted as for one on the ring (TakeGroupRoom: once
  // for all of a batch's jobs of the group, store::GroupRoom; the
  // statement below counted the group for each job, as deep as it is:
  // 2,000 scheduled jobs of one tenant took 0.75 s), the row inserted
  // directly.
  if (has_group && internal::CanInsertJobRow(catalog)) {
    pg::LockGroup(queue.id, job.group);
    const bool room = internal::TakeGroupRoom(spi, queue, job.group_key, job.room);
    return InsertPlain(spi, queue, job, catalog, room ? 'p' : 'w');
  }
  if (has_group) pg::LockGroup(queue.id, job.group);
  pg::Params params;
  internal::SetJobParams(params, queue, job);
  const pg::Result inserted = spi.Execute(InsertOne(GroupOf(queue, job)), params);
  internal::AfterInsert(spi, &queue, 1, inserted);
  return inserted.Int64(0, "id");
}

}  // namespace

std::optional<int64> Insert(pg::SpiSession& spi, const Queue& queue, const NewJob& job) {
  const std::optional<int64> id = InsertJob(spi, queue, job);
  if (id) pg::ledger::NoteUnfinished(queue.id, 1);
  return id;
}

namespace internal {

Datum Int8Array(const std::vector<int64>& values) {
  auto datums = pg::MakeSmallVector<Datum, 16>(CurrentMemoryContext);
  datums.reserve(values.size());
  for (const int64 value : values) datums.push_back(Int64GetDatum(value));
  return PointerGetDatum(pg::Guard([&] {
    return construct_array(datums.data(), static_cast<int>(datums.size()), INT8OID, sizeof(int64),
                           FLOAT8PASSBYVAL, TYPALIGN_DOUBLE);
  }));
}

Datum TextArray(const std::vector<std::string>& values) {
  auto datums = pg::MakeSmallVector<Datum, 16>(CurrentMemoryContext);
  datums.reserve(values.size());
  for (const std::string& value : values) datums.push_back(pg::TextDatum(value));
  return PointerGetDatum(pg::Guard([&] {
    return construct_array(datums.data(), static_cast<int>(datums.size()), TEXTOID, -1, false,
                           TYPALIGN_INT);
  }));
}

Datum Int4Array(const std::vector<int32>& values) {
  auto datums = pg::MakeSmallVector<Datum, 16>(CurrentMemoryContext);
  datums.reserve(values.size());
  for (const int32 value : values) datums.push_back(Int32GetDatum(value));
  return PointerGetDatum(pg::Guard([&] {
    return construct_array(datums.data(), static_cast<int>(datums.size()), INT4OID, sizeof(int32),
                           true, TYPALIGN_INT);
  }));
}

pg::Params& SetJobParams(pg::Params& params, const Queue& queue, const NewJob& job) {
  return params.Set(0, Int32GetDatum(queue.id))
      .Set(1, job.payload)
      .Set(2, TimestampTzGetDatum(job.run_at))
      .Set(3, Int32GetDatum(job.priority))
      .SetOptional(4, job.dedupe_key == 0, job.dedupe_key)
      .Set(5, Int32GetDatum(job.max_attempts))
      .SetOptional(6, job.group_key == 0, job.group_key)
      .SetOptional(7, job.dedupe_for == 0, job.dedupe_for)
      .SetOptional(11, job.trace_context == 0, job.trace_context);
}

// The most columns pgq.job_rows may have (its own and dropped ones) for
// InsertJobRow.
constexpr int kMaxJobColumns = 48;

bool CanInsertJobRow(const Catalog& catalog) {
  const JobColumns& c = catalog.job_columns;
  if (!OidIsValid(catalog.jobs) || !OidIsValid(catalog.job_id_seq)) return false;
  if (c.natts <= 0 || c.natts > kMaxJobColumns) return false;
  for (const AttrNumber column :
       {c.id, c.queue_id, c.state, c.priority, c.run_at, c.attempt, c.max_attempts, c.enqueued_at,
        c.payload, c.last_error, c.has_dependents, c.claimed_at, c.claimed_by, c.lease_until,
        c.group_key, c.dedupe_key, c.dedupe_for, c.trace_context}) {
    if (column <= 0 || column > c.natts) return false;
  }
  return true;
}

void InsertJobRow(const Catalog& catalog, const JobRow& row) {
  const JobColumns& c = catalog.job_columns;
  Datum values[kMaxJobColumns] = {};
  bool nulls[kMaxJobColumns];
  std::fill(nulls, nulls + c.natts, true);
  const auto set = [&](AttrNumber column, Datum value) {
    values[column - 1] = value;
    nulls[column - 1] = false;
  };
  set(c.id, Int64GetDatum(row.id));
  set(c.queue_id, Int32GetDatum(row.queue_id));
  set(c.state, CharGetDatum(row.state));
  set(c.priority, Int32GetDatum(row.priority));
  set(c.run_at, TimestampTzGetDatum(row.run_at));
  set(c.attempt, Int32GetDatum(row.attempt));
  set(c.max_attempts, Int32GetDatum(row.max_attempts));
  set(c.enqueued_at, TimestampTzGetDatum(row.enqueued_at));
  set(c.payload, row.payload);
  if (row.last_error != 0) set(c.last_error, row.last_error);
  if (row.has_dependents) set(c.has_dependents, BoolGetDatum(true));
  if (row.claimed_at) set(c.claimed_at, TimestampTzGetDatum(*row.claimed_at));
  if (row.claimed_by != 0) set(c.claimed_by, Int32GetDatum(row.claimed_by));
  if (row.lease_until) set(c.lease_until, TimestampTzGetDatum(*row.lease_until));
  if (row.group_key != 0) set(c.group_key, row.group_key);
  if (row.dedupe_key != 0) set(c.dedupe_key, row.dedupe_key);
  if (row.dedupe_for != 0) set(c.dedupe_for, row.dedupe_for);
  if (row.trace_context != 0) set(c.trace_context, row.trace_context);
  pg::InsertRow(catalog.jobs, values, nulls);
}

}  // namespace internal

pg::Result InsertMany(pg::SpiSession& spi, const Queue& queue, Datum payloads, TimestampTz run_at,
                      int32 priority, const std::vector<int64>* parents, Datum trace_context,
                      Datum trace_links) {
  pg::Params params;
  params.Set(0, Int32GetDatum(queue.id))
      .Set(1, payloads)
      .Set(2, TimestampTzGetDatum(run_at))
      .Set(3, Int32GetDatum(priority))
      .SetOptional(4, trace_context == 0, trace_context);
  if (parents != nullptr && !parents->empty()) {
    params.Set(5, Int32GetDatum(static_cast<int32>(parents->size())))
        .SetOptional(6, trace_links == 0, trace_links);
    pg::Result inserted = spi.Execute(insert_many_waiting(), params);
    std::vector<int64> ids;
    ids.reserve(inserted.size());
    const int id_column = inserted.empty() ? 0 : inserted.ColumnNumber("id");
    for (uint64 row = 0; row < inserted.size(); ++row)
      ids.push_back(inserted.Int64(row, id_column));
    if (!ids.empty()) internal::AddDependencies(spi, *parents, ids);
    pg::ledger::NoteUnfinished(queue.id, static_cast<int64>(inserted.size()));
    return inserted;
  }
  if (queue.ring_id != 0 && ring::DueOnRing(run_at, pg::Now()) && pg::job_ring::Available()) {
    bool placed = false;
    pg::Result on_ring =
        InsertManyOnRing(spi, queue, payloads, priority, run_at, trace_context, &placed);
    if (placed) {
      pg::ledger::NoteUnfinished(queue.id, static_cast<int64>(on_ring.size()));
      return on_ring;
    }
  }
  pg::Result inserted = spi.Execute(insert_many(), params);
  internal::AfterInsert(spi, &queue, 1, inserted);
  pg::ledger::NoteUnfinished(queue.id, static_cast<int64>(inserted.size()));
  return inserted;
}

void InsertEvent(pg::SpiSession& spi, const Queue* queues, int count, int64 event_id, Datum topic,
                 Datum payload, TimestampTz run_at, Datum group_key, std::string_view group,
                 Datum trace_context) {
  auto ids = pg::MakeSmallVector<Datum, 8>(CurrentMemoryContext);
  ids.reserve(count);
  for (int i = 0; i < count; ++i) ids.push_back(Int32GetDatum(queues[i].id));
  ArrayType* id_array = pg::Guard([&] {
    return construct_array(ids.data(), count, INT4OID, sizeof(int32), true, TYPALIGN_INT);
  });
  pg::Params params;
  params.Set(0, Int64GetDatum(event_id))
      .Set(1, topic)
      .Set(2, payload)
      .Set(3, TimestampTzGetDatum(run_at))
      .Set(4, PointerGetDatum(id_array))
      .SetOptional(5, trace_context == 0, trace_context);
  if (group_key == 0) {
    const pg::Result inserted = spi.Execute(insert_event(), params);
    internal::AfterInsert(spi, queues, count, inserted);
    if (!inserted.empty()) {
      const int queue_column = inserted.ColumnNumber("queue_id");
      for (uint64 row = 0; row < inserted.size(); ++row) {
        pg::ledger::NoteUnfinished(inserted.Int32(row, queue_column), 1);
      }
    }
    return;
  }
  // Grouped: each queue's job through Insert, in queue id order (as the
  // caller locked the queues), so each group's lock is taken in that order.
  params.Set(5, group_key);
  const pg::Result targets = spi.Execute(grouped_event_targets, params);
  if (targets.empty()) return;
  const int queue_id_column = targets.ColumnNumber("queue_id"),
            max_attempts = targets.ColumnNumber("max_attempts"),
            group_concurrency = targets.ColumnNumber("group_concurrency"),
            dedupe_periods = targets.ColumnNumber("dedupe_periods"),
            payload_column = targets.ColumnNumber("payload");
  for (uint64 row = 0; row < targets.size(); ++row) {
    const int32 queue_id = targets.Int32(row, queue_id_column);
    const Queue* queue = std::find_if(queues, queues + count,
                                      [queue_id](const Queue& q) { return q.id == queue_id; });
    if (queue == queues + count) continue;
    bool is_null = false;
    NewJob job{targets.Value(row, payload_column, &is_null),
               run_at,
               0,
               targets.Int32(row, max_attempts),
               0,
               group_key,
               group,
               0};
    job.trace_context = trace_context;
    const Queue target{queue->id, queue->name, queue->notify, targets.Bool(row, dedupe_periods),
                       targets.Int32(row, group_concurrency)};
    Insert(spi, target, job);
  }
}

}  // namespace pgq::store
