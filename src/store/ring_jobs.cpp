// The queues' rings (store/ring_jobs.h, ADR 0028 step 2a).
#include "store/ring_jobs.h"

#include <algorithm>
#include <memory>
#include <unordered_map>

#include "pg/args.h"
#include "pg/invalidation.h"
#include "pg/ledger.h"
#include "pg/queue_lock.h"
#include "pg/queue_slots.h"
#include "pg/segments.h"
#include "pg/trace_context.h"
#include "pg/settings.h"
#include "store/catalog.h"
#include "store/internal.h"
#include "store/queues.h"

extern "C" {
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "miscadmin.h"
#include "storage/itemptr.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "storage/procarray.h"
#include "tcop/utility.h"
#include "utils/array.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
}

namespace pgq::store::ring {

namespace {

constexpr const char* kRoot = "job_log";
constexpr int kSegments = 4;

// A queue's rings as this backend knows them, one per priority it serves
// on rings, highest first (pgq.queue_rings): where new rows go, and
// whether the queue keeps its completed jobs.
struct KnownRing {
  int32 priority;
  pg::job_ring::Place place;
};
struct Known {
  std::vector<KnownRing> rings;
  bool keeps_history;
  // The ring of `priority`, or nullptr.
  const KnownRing* Of(int32 priority) const {
    for (const KnownRing& ring : rings) {
      if (ring.priority == priority) return &ring;
    }
    return nullptr;
  }
  const KnownRing* WithId(int32 ring_id) const {
    for (const KnownRing& ring : rings) {
      if (ring.place.ring_id == ring_id) return &ring;
    }
    return nullptr;
  }
};
std::unordered_map<int32, Known>* known = nullptr;
pg::CacheEpoch known_epoch{pg::invalidation::kQueues | pg::invalidation::kRings};

// A fair queue's weights other than 1 (pgq.set_group_weight).
pg::Statement weights_of_queue = {
    "SELECT group_key, weight FROM pgq.group_weights WHERE queue_id = $1", 1, {INT4OID}, nullptr};

pg::Statement rings_of_queue = {
    "SELECT r.priority, r.ring_id, q.keep_completed > '0' AS keeps_history,"
    "       q.fairness IS NOT NULL OR q.rate_limit_per_key IS NOT NULL AS fair,"
    "       COALESCE(q.rate_limit_per_key, 0)::float8 AS key_rate"
    "  FROM pgq.queue_rings r JOIN pgq.queues q ON q.queue_id = r.queue_id"
    " WHERE r.queue_id = $1 ORDER BY r.priority DESC",
    1,
    {INT4OID},
    nullptr};

pg::job_ring::Place PlaceFrom(int32 queue_id, int32 ring_id, const pg::segments::Ring& ring) {
  return pg::job_ring::Place{
      queue_id,     ring_id,         static_cast<int16>(ring.first),
      ring.current, ring.generation, std::vector<Oid>(ring.leaves, ring.leaves + ring.segments)};
}

// The ring as the ledger says now; false if it has none (dropped).
bool PlaceOf(pg::SpiSession& spi, int32 queue_id, int32 ring_id, pg::job_ring::Place* place) {
  pg::segments::Ring ring;
  if (!pg::segments::LoadRing(spi, kRoot, ring_id, &ring)) return false;
  *place = PlaceFrom(queue_id, ring_id, ring);
  return true;
}

// The queue's rings; nullptr if it has none (any more). Valid until the
// next call.
const Known* KnownOf(pg::SpiSession& spi, int32 queue_id) {
  if (known == nullptr) known = new std::unordered_map<int32, Known>();
  if (!known_epoch.Valid()) known->clear();
  if (auto it = known->find(queue_id); it != known->end()) return &it->second;
  const uint64 begun = known_epoch.Begin();
  pg::Params params;
  params.Set(0, Int32GetDatum(queue_id));
  pg::Result rows = spi.Execute(rings_of_queue, params);
  if (rows.empty()) return nullptr;
  Known entry{{}, rows.Bool(0, "keeps_history")};
  const bool fair = rows.Bool(0, "fair");
  bool is_null = false;
  const double key_rate = DatumGetFloat8(rows.Value(0, rows.ColumnNumber("key_rate"), &is_null));
  std::vector<std::pair<int32, int32>> rings;
  for (uint64 row = 0; row < rows.size(); ++row) {
    rings.emplace_back(rows.Int32(row, "priority"), rows.Int32(row, "ring_id"));
  }
  rows.Free();
  for (const auto& [priority, ring_id] : rings) {
    KnownRing ring{priority, {}};
    if (PlaceOf(spi, queue_id, ring_id, &ring.place)) {
      ring.place.fair = fair;
      ring.place.key_rate = key_rate;
      entry.rings.push_back(std::move(ring));
    }
  }
  if (fair) {
    // Its keys' weights, by the key its lane files a job under.
    pg::Result weights = spi.Execute(weights_of_queue, params);
    if (!weights.empty()) {
      auto by_key = std::make_shared<std::unordered_map<uint64, uint32>>();
      // An order-free digest of the weights, never 0.
      uint64 stamp = 1;
      for (uint64 row = 0; row < weights.size(); ++row) {
        const uint64 key = pg::job_ring::FairKey(weights.Text(row, "group_key"));
        const uint32 weight = static_cast<uint32>(weights.Int32(row, "weight"));
        (*by_key)[key] = weight;
        stamp += (key ^ (uint64{weight} * 0x9E3779B97F4A7C15ULL)) * 0xBF58476D1CE4E5B9ULL;
      }
      if (stamp == 0) stamp = 1;
      for (KnownRing& ring : entry.rings) {
        ring.place.weights = by_key;
        ring.place.weights_stamp = stamp;
      }
    }
    weights.Free();
  }
  if (entry.rings.empty()) return nullptr;
  auto [it, added] = known->insert_or_assign(queue_id, std::move(entry));
  known_epoch.Mark(begun);
  return &it->second;
}

// The ring of a running job's lease (its queue's ring `lease.ring_id`), and
// whether its queue keeps history; false if that ring is gone.
bool RingOfLease(pg::SpiSession& spi, const pg::job_ring::Lease& lease, pg::job_ring::Place* place,
                 bool* keeps_history = nullptr) {
  const Known* queue = KnownOf(spi, lease.queue_id);
  const KnownRing* ring = queue == nullptr ? nullptr : queue->WithId(lease.ring_id);
  if (ring == nullptr) return false;
  *place = ring->place;
  if (keeps_history != nullptr) *keeps_history = queue->keeps_history;
  return true;
}

bool InScope(const Scope& scope, int32 queue_id) {
  if (scope.every) return true;
  ArrayType* ids = DatumGetArrayTypeP(scope.ids);
  const int count = ArrayGetNItems(ARR_NDIM(ids), ARR_DIMS(ids));
  const int32* values = reinterpret_cast<const int32*>(ARR_DATA_PTR(ids));
  for (int i = 0; i < count; ++i) {
    if (values[i] == queue_id) return true;
  }
  return false;
}

// pgq.claimed_job's columns, then run_at, trace_context and trace_links
// (none on a ring): what store::Claim returns.
TupleDesc ClaimedDesc() {
  static TupleDesc desc = pg::Result::Describe({{"id", INT8OID},
                                                {"queue", TEXTOID},
                                                {"payload", JSONBOID},
                                                {"attempt", INT4OID},
                                                {"max_attempts", INT4OID},
                                                {"lease_until", TIMESTAMPTZOID},
                                                {"enqueued_at", TIMESTAMPTZOID},
                                                {"priority", INT4OID},
                                                {"run_at", TIMESTAMPTZOID},
                                                {"trace_context", TEXTOID},
                                                {"trace_links", TEXTARRAYOID}});
  return desc;
}

// The table's statement for a ring job moved into pgq.job_rows: running, with
// the attempt and lease it had (InsertJobsSql's one column list).
pg::Statement& move_job() {
  static internal::BuiltStatement statement{
      internal::InsertJobsSql("", R"sql(
VALUES ($1, $2, 'r', $3, $4, $5, $6, $7, $14, $13, $16, $8, $9, $10, $11, $12, $15, $17, NULL))sql",
                              "",
                              ", lease_until, claimed_at, has_dependents, claimed_by, dedupe_for"),
      {INT8OID, INT4OID, INT4OID, TIMESTAMPTZOID, INT4OID, INT4OID, TIMESTAMPTZOID, JSONBOID,
       TIMESTAMPTZOID, TIMESTAMPTZOID, BOOLOID, INT4OID, TEXTOID, TEXTOID, INTERVALOID, TEXTOID,
       TEXTOID}};
  return statement.get();
}

// A ring job whose attempts are spent, into dead-letter (BurySql's columns
// of a row): $1 id, $2 queue, $3 payload, $4 attempt, $5 priority, $6
// max_attempts, $7 enqueued_at, $8 last_error, $9 now, $10 group_key, $11
// dedupe_key, $12 dedupe_for, $13 trace_context; the reason a
// failure's ('exhausted'), an expiry's ('expired') or a cancel's.
constexpr std::string_view kRingJobAsRow = R"sql(
SELECT $1::int8 AS id, $2::int4 AS queue_id, $3::jsonb AS payload, $4::int4 AS attempt,
       $5::int4 AS priority, $6::int4 AS max_attempts, $7::timestamptz AS enqueued_at,
       $11::text AS dedupe_key, $10::text AS group_key, NULL::jsonb AS progress,
       $12::interval AS dedupe_for, $13::text AS trace_context, NULL::text[] AS trace_links)sql";
constexpr Oid kBuryTypes[] = {INT8OID, INT4OID,        JSONBOID, INT4OID,        INT4OID,
                              INT4OID, TIMESTAMPTZOID, TEXTOID,  TIMESTAMPTZOID, TEXTOID,
                              TEXTOID, INTERVALOID,    TEXTOID};
enum class DeathOf { kExhausted, kExpired, kCancelled };
pg::Statement& bury_job(DeathOf death) {
  static constexpr const char* kReasons[] = {"exhausted", "expired", "cancelled"};
  static internal::BuiltStatement statements[3] = {
      {internal::BurySql(kRingJobAsRow, "$8", kReasons[0], "$9"), kBuryTypes},
      {internal::BurySql(kRingJobAsRow, "$8", kReasons[1], "$9"), kBuryTypes},
      {internal::BurySql(kRingJobAsRow, "$8", kReasons[2], "$9"), kBuryTypes}};
  return statements[static_cast<int>(death)].get();
}

// A ring job as a running row of pgq.job_rows: moved there while it runs
// (MoveToTable) or spilled by its claim (Spill).
void InsertRunning(pg::SpiSession& spi, int32 queue_id, const pg::job_ring::NewEntry& entry,
                   int32 attempt, TimestampTz lease_until, TimestampTz claimed_at,
                   bool has_dependents, int32 claimed_by) {
  pg::Params params;
  params.Set(0, Int64GetDatum(entry.id))
      .Set(1, Int32GetDatum(queue_id))
      .Set(2, Int32GetDatum(entry.priority))
      .Set(3, TimestampTzGetDatum(entry.run_at))
      .Set(4, Int32GetDatum(attempt))
      .Set(5, Int32GetDatum(entry.max_attempts))
      .Set(6, TimestampTzGetDatum(entry.enqueued_at))
      .Set(7, entry.payload)
      .Set(8, TimestampTzGetDatum(lease_until))
      .Set(9, TimestampTzGetDatum(claimed_at))
      .SetOptional(10, !has_dependents, BoolGetDatum(true))
      .SetOptional(11, claimed_by == 0, Int32GetDatum(claimed_by))
      .SetOptional(12, entry.group_key == 0, entry.group_key)
      .SetOptional(13, entry.dedupe_key == 0, entry.dedupe_key)
      .SetOptional(14, entry.dedupe_for == 0, entry.dedupe_for)
      .SetOptional(15, entry.last_error == 0, entry.last_error)
      .SetOptional(16, entry.trace_context == 0, entry.trace_context);
  (void)spi.Execute(move_job(), params);
}

}  // namespace

void CreateRing(pg::SpiSession& spi, int32 ring_id, TimestampTz now) {
  // A claim cursor never looks behind itself (pg/job_ring.h), so a line
  // pointer must never be reused: a VACUUM (the anti-wraparound one runs
  // even with autovacuum off) leaves dead ones dead until the TRUNCATE.
  // That takes both options: without index cleanup, VACUUM leaves dead
  // line pointers dead — but only on a table with an index (on one without,
  // it frees them at once). Hence an index that holds no row, ever: its
  // predicate is false, so the appends that make no index entries (the
  // ring's) leave it right, and no query can use it.
  pg::segments::CreateRing(spi, kRoot, ring_id, kSegments, {"(id) WHERE false"}, now,
                           "vacuum_index_cleanup = off");
}

namespace {
pg::Statement drop_priority_rings = {
    "DELETE FROM pgq.priority_rings WHERE queue_id = $1 RETURNING ring_id", 1, {INT4OID}, nullptr};
}  // namespace

void DropRings(pg::SpiSession& spi, int32 queue_id, int32 ring_id, TimestampTz now) {
  pg::Params params;
  params.Set(0, Int32GetDatum(queue_id));
  pg::Result rows = spi.Execute(drop_priority_rings, params);
  std::vector<int32> rings{ring_id};
  for (uint64 row = 0; row < rows.size(); ++row) rings.push_back(rows.Int32(row, "ring_id"));
  rows.Free();
  for (const int32 ring : rings) {
    pg::segments::DropRing(spi, kRoot, ring, now);
    pg::job_ring::Forget(ring);
  }
}

bool Enqueue(pg::SpiSession& spi, const Queue& queue, const Datum* payloads, int count,
             int32 max_attempts, int32 priority, TimestampTz run_at, int64* ids, Datum group_key,
             Datum dedupe_key, Datum dedupe_for, Datum trace_context) {
  // Enqueued at the transaction's start, as a job of pgq.job_rows.
  const TimestampTz enqueued_at = GetCurrentTransactionStartTimestamp();
  const Known* rings = KnownOf(spi, queue.id);
  if (rings == nullptr) {
    pg::Raise(ERRCODE_INTERNAL_ERROR, "queue " + std::to_string(queue.id) + " has no ring");
  }
  const KnownRing* ring = rings->Of(priority);
  if (ring == nullptr) {
    // A priority the queue serves on no ring yet: the maintenance gives it
    // one if the queue has room for another (kMaxPriorities); its jobs wait
    // in pgq.job_rows meanwhile, claimed from there in order.
    if (static_cast<int>(rings->rings.size()) < kMaxPriorities) {
      pg::WantPriorityRing(pg::FindQueueSlot(queue.id), priority);
    }
    return false;
  }
  // Refused as an INSERT into pgq.job_rows is, before the ids are drawn.
  pg::Guard([] { PreventCommandIfReadOnly("INSERT"); });
  const Oid sequence = InstalledCatalog().job_id_seq;
  std::vector<pg::job_ring::NewEntry> entries(static_cast<size_t>(count));
  pg::Guard([&] {
    for (int i = 0; i < count; ++i) {
      // A keyed job's id was drawn with its key's row.
      if (dedupe_key == 0) ids[i] = nextval_internal(sequence, false);
      entries[i] =
          pg::job_ring::NewEntry{ids[i],      priority,  max_attempts, run_at,    enqueued_at,
                                 payloads[i], group_key, dedupe_key,   dedupe_for};
      entries[i].trace_context = trace_context;
    }
  });
  if (!pg::job_ring::Append(ring->place, entries.data(), count)) return false;
  internal::NotifyListeners(spi, queue);
  // Waiting claims look again at commit (the claim hint is pgq.job_rows').
  pg::ledger::NoteReady(queue.id);
  return true;
}

namespace {

// The group keys and run_at of the rows $2 (a fair key's next row, for a
// key with rows only) of queue $1.
pg::Statement keys_of_rows = {
    "SELECT id, group_key, run_at FROM pgq.job_rows WHERE id = ANY ($2) AND queue_id = $1",
    2,
    {INT4OID, INT8ARRAYOID},
    nullptr};
// The running rows of each group key of $2 (a capped group's jobs let in
// from the table run as rows): an index probe each.
pg::Statement running_rows_of_keys = {R"sql(
SELECT k.key, (SELECT count(*) FROM pgq.job_rows x
                WHERE x.queue_id = $1 AND x.group_key = k.key AND x.state = 'r') AS running
  FROM pg_catalog.unnest($2::text[]) k(key))sql",
                                      2,
                                      {INT4OID, TEXTARRAYOID},
                                      nullptr};

}  // namespace

std::vector<pg::job_ring::FairKeyStat> BusiestFairKeys(pg::SpiSession& spi, int32 queue_id,
                                                       int max_keys) {
  std::vector<pg::job_ring::FairKeyStat> keys;
  const Known* rings = pg::job_ring::Available() ? KnownOf(spi, queue_id) : nullptr;
  if (rings == nullptr) return keys;
  const std::vector<KnownRing> each = rings->rings;  // KnownOf's map may change below
  for (const KnownRing& ring : each) {
    std::vector<pg::job_ring::FairKeyStat> of_ring =
        pg::job_ring::BusiestFairKeys(ring.place, max_keys);
    keys.insert(keys.end(), std::make_move_iterator(of_ring.begin()),
                std::make_move_iterator(of_ring.end()));
  }
  std::stable_sort(keys.begin(), keys.end(),
                   [](const auto& a, const auto& b) { return a.served > b.served; });
  if (static_cast<int>(keys.size()) > max_keys) keys.resize(static_cast<size_t>(max_keys));
  if (keys.empty()) return keys;
  // What the lanes cannot read: the group keys of the keys with rows only
  // (one whose row is gone meanwhile is left out), and every key's running
  // rows.
  std::vector<int64> rows;
  for (const pg::job_ring::FairKeyStat& key : keys) {
    if (key.row != 0) rows.push_back(key.row);
  }
  std::unordered_map<int64, std::pair<std::string, TimestampTz>> of_row;
  if (!rows.empty()) {
    pg::Params params;
    params.Set(0, Int32GetDatum(queue_id)).Set(1, internal::Int8Array(rows));
    pg::Result found = spi.Execute(keys_of_rows, params);
    for (uint64 r = 0; r < found.size(); ++r) {
      bool is_null = false;
      const int64 id = DatumGetInt64(found.Value(r, "id", &is_null));
      const TimestampTz at = DatumGetTimestampTz(found.Value(r, "run_at", &is_null));
      of_row[id] = {found.Text(r, "group_key"), at};
    }
  }
  std::vector<pg::job_ring::FairKeyStat> out;
  std::vector<std::string> named;
  for (pg::job_ring::FairKeyStat& key : keys) {
    if (key.row != 0) {
      const auto it = of_row.find(key.row);
      if (it == of_row.end()) continue;
      key.group_key = it->second.first;
      key.ready_since = it->second.second;
    }
    if (!key.group_key.empty()) named.push_back(key.group_key);
    out.push_back(std::move(key));
  }
  if (!named.empty()) {
    pg::Params params;
    params.Set(0, Int32GetDatum(queue_id)).Set(1, internal::TextArray(named));
    pg::Result found = spi.Execute(running_rows_of_keys, params);
    std::unordered_map<std::string, int64> running;
    for (uint64 r = 0; r < found.size(); ++r) {
      bool is_null = false;
      running[found.Text(r, "key")] = DatumGetInt64(found.Value(r, "running", &is_null));
    }
    for (pg::job_ring::FairKeyStat& key : out) {
      const auto it = running.find(key.group_key);
      if (it != running.end()) key.running += static_cast<int32>(it->second);
    }
  }
  return out;
}

pg::job_ring::Pending CountPending(pg::SpiSession& spi, int32 queue_id, int64 limit) {
  const Known* rings = pg::job_ring::Available() ? KnownOf(spi, queue_id) : nullptr;
  if (rings == nullptr) return {};
  // Each ring counted up to what the ones before left of `limit`.
  pg::job_ring::Pending sum;
  const std::vector<KnownRing> each = rings->rings;  // KnownOf's map may change below
  for (const KnownRing& ring : each) {
    const pg::job_ring::Pending one =
        pg::job_ring::CountPending(ring.place, std::max<int64>(limit - sum.count, 1));
    sum.count += one.count;
    sum.oldest = std::min(sum.oldest, one.oldest);
    sum.cut = sum.cut || one.cut;
    sum.no_lane = sum.no_lane || one.no_lane;
  }
  return sum;
}

std::vector<QueueRing> RingsOf(pg::SpiSession& spi, int32 queue_id) {
  std::vector<QueueRing> out;
  const Known* rings = KnownOf(spi, queue_id);
  if (rings == nullptr) return out;
  for (const KnownRing& ring : rings->rings) {
    out.push_back(QueueRing{queue_id, ring.priority, ring.place.ring_id, ring.place.fair});
  }
  return out;
}

int Peek(pg::SpiSession& spi, int32 queue_id, int32 ring_id, core::ClaimKey* next, int max_keys) {
  const Known* rings = pg::job_ring::Available() ? KnownOf(spi, queue_id) : nullptr;
  const KnownRing* ring = rings == nullptr ? nullptr : rings->WithId(ring_id);
  if (ring == nullptr || max_keys <= 0) return 0;
  const int32 priority = ring->priority;
  std::vector<pg::job_ring::Bound> keys(static_cast<size_t>(max_keys));
  const int found = pg::job_ring::Peek(ring->place, keys.data(), max_keys);
  for (int i = 0; i < found; ++i) next[i] = core::ClaimKey{priority, keys[i].run_at, keys[i].id};
  return found;
}

int Peek(pg::SpiSession& spi, int32 queue_id, core::ClaimKey* next, int max_keys) {
  // Each ring's first keys, then the first of them all in claim order.
  std::vector<core::ClaimKey> keys;
  for (const QueueRing& ring : RingsOf(spi, queue_id)) {
    std::vector<core::ClaimKey> of_ring(static_cast<size_t>(max_keys));
    of_ring.resize(
        static_cast<size_t>(Peek(spi, queue_id, ring.ring_id, of_ring.data(), max_keys)));
    keys.insert(keys.end(), of_ring.begin(), of_ring.end());
  }
  const size_t take = std::min(keys.size(), static_cast<size_t>(std::max(max_keys, 0)));
  std::partial_sort(keys.begin(), keys.begin() + take, keys.end(), core::ClaimsBefore);
  std::copy(keys.begin(), keys.begin() + take, next);
  return static_cast<int>(take);
}

namespace {

// The claimed jobs that found no room in the lease map (pg/job_ring.h
// Claimed::spilled): running rows of pgq.job_rows, as MoveToTable makes a
// running ring job one, with this claim's lease; their ends are the table's.
void Spill(pg::SpiSession& spi, const pg::job_ring::Place& place,
           const std::vector<pg::job_ring::Claimed>& claimed, TimestampTz until, TimestampTz now) {
  std::vector<int64> ids;
  for (const pg::job_ring::Claimed& job : claimed) {
    if (job.spilled) ids.push_back(job.id);
  }
  if (ids.empty()) return;
  // Children named them while they were pending: the table's end settles them.
  const std::vector<int64> parents = ParentsAmong(spi, place, ids);
  for (const pg::job_ring::Claimed& job : claimed) {
    if (!job.spilled) continue;
    const bool has_dependents = std::find(parents.begin(), parents.end(), job.id) != parents.end();
    pg::job_ring::NewEntry entry{job.id,        job.priority,    job.max_attempts,
                                 job.run_at,    job.enqueued_at, job.payload,
                                 job.group_key, job.dedupe_key,  job.dedupe_for};
    entry.trace_context = job.trace_context;
    InsertRunning(spi, place.queue_id, entry, job.attempt, until, now, has_dependents, MyProcPid);
  }
  // A grouped one's row counts it in its group from now on.
  std::vector<int64> grouped;
  for (const pg::job_ring::Claimed& job : claimed) {
    if (job.spilled && job.group_key != 0) grouped.push_back(job.id);
  }
  (void)internal::LetGroupsGo(spi, grouped);
}

}  // namespace

void TakeOnto(pg::SpiSession& spi, int32 queue_id, const pg::Result& jobs, TimestampTz now) {
  const int moved = jobs.ColumnNumber("moved");
  std::vector<uint64> rows;
  for (uint64 row = 0; row < jobs.size(); ++row) {
    if (jobs.Bool(row, moved)) rows.push_back(row);
  }
  if (rows.empty()) return;
  const int id = jobs.ColumnNumber("id"), priority = jobs.ColumnNumber("priority"),
            attempt = jobs.ColumnNumber("attempt"),
            max_attempts = jobs.ColumnNumber("max_attempts"), run_at = jobs.ColumnNumber("run_at"),
            enqueued_at = jobs.ColumnNumber("enqueued_at"), payload = jobs.ColumnNumber("payload"),
            group_key = jobs.ColumnNumber("group_key"),
            dedupe_key = jobs.ColumnNumber("dedupe_key"),
            dedupe_for = jobs.ColumnNumber("dedupe_for"),
            last_error = jobs.ColumnNumber("last_error"),
            has_dependents = jobs.ColumnNumber("has_dependents"),
            lease_until = jobs.ColumnNumber("lease_until"),
            trace_context = jobs.ColumnNumber("trace_context");
  const auto optional = [&](uint64 row, int column) {
    bool is_null = false;
    const Datum value = jobs.Value(row, column, &is_null);
    return is_null ? Datum{0} : value;
  };
  const auto timestamp = [&](uint64 row, int column) {
    bool is_null = false;
    return DatumGetTimestampTz(jobs.Value(row, column, &is_null));
  };
  // One lease end for the claim (the statement's $4 + $3).
  const TimestampTz until = timestamp(rows.front(), lease_until);
  // The rows of one priority at a time, onto its ring (they come in claim
  // order, a priority's together).
  for (size_t from = 0; from < rows.size();) {
    const int32 level = jobs.Int32(rows[from], priority);
    size_t to = from;
    while (to < rows.size() && jobs.Int32(rows[to], priority) == level) ++to;
    const size_t count = to - from;
    std::vector<pg::job_ring::NewEntry> entries(count);
    std::vector<int32> attempts(count);
    std::vector<char> dependents(count);
    for (size_t i = 0; i < count; ++i) {
      const uint64 row = rows[from + i];
      entries[i] = pg::job_ring::NewEntry{jobs.Int64(row, id),           level,
                                          jobs.Int32(row, max_attempts), timestamp(row, run_at),
                                          timestamp(row, enqueued_at),   optional(row, payload),
                                          optional(row, group_key),      optional(row, dedupe_key),
                                          optional(row, dedupe_for),     optional(row, last_error)};
      entries[i].trace_context = optional(row, trace_context);
      attempts[i] = jobs.Int32(row, attempt);
      bool is_null = false;
      const Datum marked = jobs.Value(row, has_dependents, &is_null);
      dependents[i] = !is_null && DatumGetBool(marked);
    }
    const Known* rings = KnownOf(spi, queue_id);
    const KnownRing* ring = rings == nullptr ? nullptr : rings->Of(level);
    std::unique_ptr<bool[]> leased(new bool[count]());
    const Oid numbers = InstalledCatalog().claim_seq;
    if (ring != nullptr && OidIsValid(numbers)) {
      // Each entry's claim number, which its receipts and closure carry.
      pg::Guard([&] {
        for (pg::job_ring::NewEntry& entry : entries) {
          entry.claim_no = nextval_internal(numbers, false);
        }
      });
      const pg::job_ring::Place place = ring->place;  // KnownOf's map may change below
      if (pg::job_ring::AppendClaimed(place, entries.data(), attempts.data(),
                                      static_cast<int>(count), now, until, leased.get())) {
        // Children wait for some: the lane told before this commits, so
        // that whoever ends them looks for their pairs (ParentsAmong).
        if (std::find(dependents.begin(), dependents.end(), 1) != dependents.end()) {
          pg::job_ring::NoteDependents(place);
        }
      }
    }
    // No ring, lane or lease for it: a running row again, as a spill.
    for (size_t i = 0; i < count; ++i) {
      if (!leased[i]) {
        InsertRunning(spi, queue_id, entries[i], attempts[i], until, now, dependents[i] != 0,
                      MyProcPid);
      }
    }
    from = to;
  }
}

namespace {

// A fair queue's due rows of one priority ($3) in claim order, from after
// ($4, $5) (a scan cut short before) or the first, up to $6 of them: the
// range of jobs_ready_idx that holds them, nothing due later read. $1
// queue id, $2 now.
pg::Statement due_rows = {R"sql(
SELECT d.id, d.group_key, d.run_at FROM pgq.job_rows d
 WHERE d.queue_id = $1 AND d.state = 'p' AND (- d.priority) = (- $3) AND d.run_at <= $2
   AND (d.run_at, d.id) > ($4, $5)
 ORDER BY - d.priority, d.run_at, d.id
 LIMIT $6)sql",
                          6,
                          {INT4OID, TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID, INT8OID, INT4OID},
                          nullptr};

// Rows a scan reads at most, and files of each key (the fair order keeps
// at most a quarter of its cells for rows: core/fair_order.h FileRow).
constexpr int32 kDueRowsRead = 8192;
constexpr int kDueRowsPerKey = 2;

}  // namespace

void FileDueRows(pg::SpiSession& spi, int32 queue_id, int32 ring_id, int32 priority,
                 TimestampTz now, bool due) {
  const Known* rings = pg::job_ring::Available() ? KnownOf(spi, queue_id) : nullptr;
  const KnownRing* ring = rings == nullptr ? nullptr : rings->WithId(ring_id);
  pg::job_ring::Bound from{DT_NOBEGIN, 0};
  bool has_from = false;
  if (ring == nullptr || !pg::job_ring::RowsWanted(ring->place, due, &from, &has_from)) return;
  const pg::job_ring::Place place = ring->place;  // the scan may read the catalog again
  if (!has_from) from = pg::job_ring::Bound{DT_NOBEGIN, 0};
  pg::Params params;
  params.Set(0, Int32GetDatum(queue_id))
      .Set(1, TimestampTzGetDatum(now))
      .Set(2, Int32GetDatum(priority))
      .Set(3, TimestampTzGetDatum(from.run_at))
      .Set(4, Int64GetDatum(from.id))
      .Set(5, Int32GetDatum(kDueRowsRead));
  pg::Result found = spi.Execute(due_rows, params);
  // A few of each key, in claim order (a key's jobs in id order: a
  // capped group lets its jobs in in id order).
  std::vector<pg::job_ring::DueRow> rows;
  std::unordered_map<std::string, int> of_key;
  int of_none = 0;
  pg::job_ring::Bound last{DT_NOBEGIN, 0};
  for (uint64 r = 0; r < found.size(); ++r) {
    bool is_null = false;
    const int64 id = DatumGetInt64(found.Value(r, "id", &is_null));
    last = pg::job_ring::Bound{DatumGetTimestampTz(found.Value(r, "run_at", &is_null)), id};
    const Datum key = found.Value(r, "group_key", &is_null);
    int& taken = is_null ? of_none : of_key[found.Text(r, "group_key")];
    if (taken >= kDueRowsPerKey) continue;
    ++taken;
    rows.push_back(pg::job_ring::DueRow{id, is_null ? Datum{0} : key});
  }
  const bool cut = found.size() == static_cast<uint64>(kDueRowsRead);
  pg::job_ring::FileRows(place, rows, !has_from, cut ? &last : nullptr,
                         static_cast<int64>(found.size()));
}

pg::Result Claim(pg::SpiSession& spi, int32 queue_id, int32 ring_id, Datum name, int32 n,
                 Datum lease, TimestampTz now, const pg::job_ring::Bound* before,
                 std::vector<pg::job_ring::RowTurn>* rows) {
  // Without shared memory (the server started without preloading us) a
  // ring's jobs wait for a server that has it; pgq.job_rows' are still claimed.
  const Known* rings = n > 0 && pg::job_ring::Available() ? KnownOf(spi, queue_id) : nullptr;
  const KnownRing* known_ring = rings == nullptr ? nullptr : rings->WithId(ring_id);
  if (known_ring == nullptr) return pg::Result();
  const KnownRing ring = *known_ring;
  const TimestampTz until = pg::Guard([&] {
    return DatumGetTimestampTz(
        DirectFunctionCall2(timestamptz_pl_interval, TimestampTzGetDatum(now), lease));
  });
  const std::vector<pg::job_ring::Claimed> claimed =
      pg::job_ring::Claim(ring.place, n, now, until, before, rows);
  if (claimed.empty()) return pg::Result();
  Spill(spi, ring.place, claimed, until, now);
  pg::ledger::NoteCount(queue_id, pg::kClaims, claimed.size());
  TupleDesc desc = ClaimedDesc();
  HeapTuple* tuples = pg::Guard(
      [&] { return static_cast<HeapTuple*>(palloc(sizeof(HeapTuple) * claimed.size())); });
  for (size_t i = 0; i < claimed.size(); ++i) {
    const pg::job_ring::Claimed& job = claimed[i];
    Datum values[11] = {Int64GetDatum(job.id),
                        name,
                        job.payload,
                        Int32GetDatum(job.attempt),
                        Int32GetDatum(job.max_attempts),
                        TimestampTzGetDatum(until),
                        TimestampTzGetDatum(job.enqueued_at),
                        Int32GetDatum(job.priority),
                        TimestampTzGetDatum(job.run_at),
                        job.trace_context,
                        0};
    bool nulls[11] = {};
    nulls[9] = job.trace_context == 0;
    nulls[10] = true;
    tuples[i] = pg::Guard([&] { return heap_form_tuple(desc, values, nulls); });
  }
  return pg::Result::Rows(desc, tuples, claimed.size());
}

namespace {

pg::Statement ring_queues = {
    "SELECT queue_id, ring_id FROM pgq.queue_rings ORDER BY queue_id, priority DESC",
    0,
    {},
    nullptr};

// The rings of this database's queues: (queue id, ring id), a queue's
// highest priority first.
std::vector<std::pair<int32, int32>> RingQueues(pg::SpiSession& spi) {
  pg::Params none;
  pg::Result rows = spi.Execute(ring_queues, none);
  std::vector<std::pair<int32, int32>> queues;
  const int queue_column = rows.empty() ? 0 : rows.ColumnNumber("queue_id");
  const int ring_column = rows.empty() ? 0 : rows.ColumnNumber("ring_id");
  for (uint64 row = 0; row < rows.size(); ++row) {
    queues.emplace_back(rows.Int32(row, queue_column), rows.Int32(row, ring_column));
  }
  rows.Free();
  return queues;
}

// The lanes epoch (pg/job_ring.h LanesEpoch) at which this backend last
// built its database's lanes.
uint32 lanes_built_at = 0;

}  // namespace

namespace {
pg::Statement any_dependency = {
    "SELECT EXISTS (SELECT 1 FROM pgq.job_dependencies) AS any", 0, {}, nullptr};
}  // namespace

void EnsureLanes(pg::SpiSession& spi) {
  if (!pg::job_ring::Available()) return;
  const uint32 epoch = pg::job_ring::LanesEpoch();
  if (lanes_built_at == epoch) return;
  if (pg::job_ring::LanesEnsured(epoch)) {
    lanes_built_at = epoch;
    return;
  }
  const std::vector<std::pair<int32, int32>> queues = RingQueues(spi);
  // After a start (or lanes freed): children committed before it may wait
  // for ring jobs, whose ends must look for them.
  pg::Params none;
  if (!queues.empty() && spi.Execute(any_dependency, none).Bool(0, "any")) {
    pg::job_ring::NoteDependentsOfDatabase();
  }
  // More queues than the database's share of lanes: a lane with no lease
  // is taken back by the next one built (its queue's next use builds it
  // again), so the leases of every queue are entered as long as the
  // queues with running jobs fit the share.
  bool all = true;
  for (const auto& [queue_id, ring_id] : queues) {
    const Known* rings = KnownOf(spi, queue_id);
    const KnownRing* ring = rings == nullptr ? nullptr : rings->WithId(ring_id);
    if (ring != nullptr) all = pg::job_ring::Build(ring->place) && all;
  }
  if (all) pg::job_ring::NoteLanesEnsured(epoch);
  lanes_built_at = epoch;
}

int64 RunningCount(pg::SpiSession& spi, int32 queue_id) {
  const Known* rings = pg::job_ring::Available() ? KnownOf(spi, queue_id) : nullptr;
  if (rings == nullptr) return 0;
  int64 running = 0;
  for (const KnownRing& ring : rings->rings) running += pg::job_ring::RunningCount(ring.place);
  return running;
}

bool Running(pg::SpiSession& spi, const Scope& scope, int64 id, pg::job_ring::Lease* lease) {
  EnsureLanes(spi);
  TransactionId closer;
  for (;;) {
    if (!pg::job_ring::FindLease(id, lease, &closer)) return false;
    if (!pg::Guard([&] { return InScope(scope, lease->queue_id); })) return false;
    // Another transaction is completing or moving it: its end says what the
    // job is (as a table job's row lock would). Only for a job of the
    // caller's queues: another team's is not told that it exists.
    if (TransactionIdIsValid(closer)) {
      pg::job_ring::WaitForCloser(closer);
      continue;
    }
    // A row of pgq.job_rows that a claim in progress is taking onto the
    // ring (AppendClaimed): its claim's end says which attempt holds it,
    // as the row's lock would (a late completion of the attempt before
    // lands if that claim rolls back, ADR 0003).
    const TransactionId claim = lease->claim_xid;
    if (lease->claim_no == 0 || !pg::Guard([&] {
          return TransactionIdIsValid(claim) && !TransactionIdIsCurrentTransactionId(claim) &&
                 TransactionIdIsInProgress(claim);
        })) {
      break;
    }
    pg::job_ring::WaitForCloser(claim);
  }
  // A lease of the queue's ring, not of an earlier one of the same ids (the
  // extension dropped and created again while the server ran).
  pg::job_ring::Place place;
  if (!RingOfLease(spi, *lease, &place)) return false;
  const std::vector<Oid>& leaves = place.leaves;
  return std::find(leaves.begin(), leaves.end(), lease->entry_relid) != leaves.end();
}

namespace {

// Closes (id, attempt) of the ring at `place` with `outcome`; while another
// transaction's close of it is in progress (it took the lease out between
// Running's look and this one), waits for it and tries again.
bool CloseWaiting(const pg::job_ring::Place& place, int64 id, int32 attempt, char outcome,
                  TimestampTz now) {
  for (;;) {
    TransactionId closer = InvalidTransactionId;
    if (pg::job_ring::Close(place, id, attempt, outcome, now, &closer)) return true;
    if (!TransactionIdIsValid(closer)) return false;
    pg::job_ring::WaitForCloser(closer);
  }
}

// One probe of the pairs' index a job: a parent with a million children
// costs what one with a single child does.
pg::Statement parents_among = {
    "SELECT p.id AS parent_id FROM pg_catalog.unnest($1) AS p(id)"
    " WHERE EXISTS (SELECT 1 FROM pgq.job_dependencies d WHERE d.parent_id = p.id)",
    1,
    {INT8ARRAYOID},
    nullptr};

// Children released by ring jobs that completed: as a table job's
// completion releases them (their counts go down, the ready ones announced,
// groups moved on).
void ReleaseChildren(pg::SpiSession& spi, const pg::job_ring::Place& place,
                     const std::vector<int64>& done, TimestampTz now) {
  const std::vector<int64> parents = ParentsAmong(spi, place, done);
  if (parents.empty()) return;
  internal::MoveGroupsOn(spi, internal::ParentsDone(spi, parents, now));
}

// A job with a dedupe key that ended on its ring (done; a dead one's key
// goes with its dead-letter row, Bury): its key's row goes or stays for its
// period, and a follower takes the key over (keys.cpp). Appends the
// follower's group, if any, to `groups`: moved on with the job's own in one
// call (one lock order).
void LeftKey(pg::SpiSession& spi, int32 queue_id, const pg::job_ring::NewEntry& entry,
             TimestampTz now, std::vector<internal::GroupRef>* groups) {
  if (entry.dedupe_key == 0) return;
  for (internal::GroupRef& group :
       internal::KeyReleased(spi, queue_id, entry.dedupe_key, entry.id, entry.dedupe_for, now)) {
    groups->push_back(std::move(group));
  }
}

}  // namespace

std::vector<int64> ParentsAmong(pg::SpiSession& spi, const pg::job_ring::Place& place,
                                const std::vector<int64>& ids) {
  if (ids.empty() || !pg::job_ring::MayHaveDependents(place)) return {};
  // Children being added now hold these locks in share mode: wait for
  // them, then read every pair committed.
  for (const int64 id : ids) pg::LockRingParent(id, true);
  pg::Params params;
  params.Set(0, internal::Int8Array(ids));
  const pg::Result found = spi.Execute(parents_among, params);
  std::vector<int64> parents;
  for (uint64 row = 0; row < found.size(); ++row) parents.push_back(found.Int64(row, "parent_id"));
  return parents;
}

bool Complete(pg::SpiSession& spi, const pg::job_ring::Lease& lease, int64 id, int32 attempt,
              Datum result, TimestampTz now) {
  pg::job_ring::Place place;
  bool keeps_history = false;
  if (!RingOfLease(spi, lease, &place, &keeps_history)) return false;
  std::vector<internal::RingCompletion> kept;
  internal::RingCompletion job{{}, attempt, lease.claimed_at};
  if (keeps_history || lease.keyed) {
    // Read while the lease holds (its segment cannot be truncated before
    // this transaction's closure of it ends).
    if (!pg::job_ring::ReadEntry(lease, &job.entry)) return false;
    if (keeps_history) kept.push_back(job);
  }
  if (!CloseWaiting(place, id, attempt, 'd', now)) return false;
  internal::KeepRingHistory(spi, lease.queue_id, kept, result, now);
  if (lease.grouped || lease.keyed) {
    std::vector<internal::GroupRef> groups;
    if (lease.grouped) groups = internal::LetGroupsGo(spi, {id});
    if (lease.keyed) LeftKey(spi, lease.queue_id, job.entry, now, &groups);
    internal::MoveGroupsOn(spi, std::move(groups));
  }
  ReleaseChildren(spi, place, {id}, now);
  // Counted once (the counters' completions with it), as a table job's.
  internal::CountFinished(spi, lease.queue_id, 1);
  pg::ledger::NoteLeftRunning(lease.queue_id);
  return true;
}

namespace {

// CompleteMany's jobs of one ring.
int32 CompleteManyOnRing(pg::SpiSession& spi, int32 queue_id, const pg::job_ring::Lease& first,
                         const int64* ids, const int32* attempts, const pg::job_ring::Lease* leases,
                         int count, TimestampTz now) {
  pg::job_ring::Place place;
  bool keeps_history = false;
  if (count == 0 || !RingOfLease(spi, first, &place, &keeps_history)) return 0;
  // The entries of a queue that keeps history, and of jobs with a dedupe
  // key, read while the leases hold.
  const bool any_keyed = std::any_of(leases, leases + count,
                                     [](const pg::job_ring::Lease& lease) { return lease.keyed; });
  std::vector<internal::RingCompletion> entries;
  if (keeps_history || any_keyed) {
    entries.resize(static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) {
      entries[i] = internal::RingCompletion{{}, attempts[i], leases[i].claimed_at};
      if (!keeps_history && !leases[i].keyed) continue;
      if (!pg::job_ring::ReadEntry(leases[i], &entries[i].entry)) entries[i].attempt = 0;
    }
  }
  std::vector<char> closed(static_cast<size_t>(count));
  std::vector<TransactionId> closers(static_cast<size_t>(count), InvalidTransactionId);
  int done = pg::job_ring::Close(place, ids, attempts, count, 'd', now,
                                 reinterpret_cast<bool*>(closed.data()), closers.data());
  // Those another transaction took out meanwhile: once it ended.
  for (int i = 0; i < count; ++i) {
    if (!TransactionIdIsValid(closers[i])) continue;
    pg::job_ring::WaitForCloser(closers[i]);
    closed[i] = CloseWaiting(place, ids[i], attempts[i], 'd', now);
    done += closed[i];
  }
  if (done > 0 && keeps_history) {
    std::vector<internal::RingCompletion> kept;
    for (int i = 0; i < count; ++i) {
      if (closed[i] && entries[i].attempt != 0) kept.push_back(entries[i]);
    }
    internal::KeepRingHistory(spi, queue_id, kept, 0, now);
  }
  if (done > 0) {
    // Groups let go, keys let go (their followers' groups): moved on in one
    // call.
    std::vector<int64> grouped;
    for (int i = 0; i < count; ++i) {
      if (closed[i] && leases[i].grouped) grouped.push_back(ids[i]);
    }
    std::vector<internal::GroupRef> groups;
    if (!grouped.empty()) groups = internal::LetGroupsGo(spi, grouped);
    for (int i = 0; any_keyed && i < count; ++i) {
      if (closed[i] && leases[i].keyed && entries[i].attempt != 0) {
        LeftKey(spi, queue_id, entries[i].entry, now, &groups);
      }
    }
    if (!groups.empty()) internal::MoveGroupsOn(spi, std::move(groups));
  }
  if (done > 0 && pg::job_ring::MayHaveDependents(place)) {
    std::vector<int64> completed;
    for (int i = 0; i < count; ++i) {
      if (closed[i]) completed.push_back(ids[i]);
    }
    ReleaseChildren(spi, place, completed, now);
  }
  if (done > 0) {
    internal::CountFinished(spi, queue_id, done);
    pg::ledger::NoteLeftRunning(queue_id);
  }
  return done;
}

}  // namespace

int32 CompleteMany(pg::SpiSession& spi, int32 queue_id, const int64* ids, const int32* attempts,
                   const pg::job_ring::Lease* leases, int count, TimestampTz now) {
  if (count == 0) return 0;
  const bool one_ring = std::all_of(leases, leases + count, [&](const pg::job_ring::Lease& lease) {
    return lease.ring_id == leases[0].ring_id;
  });
  if (one_ring) {
    return CompleteManyOnRing(spi, queue_id, leases[0], ids, attempts, leases, count, now);
  }
  // Jobs of several priorities: each ring's in one batch.
  std::vector<int32> rings;
  for (int i = 0; i < count; ++i) rings.push_back(leases[i].ring_id);
  std::sort(rings.begin(), rings.end());
  rings.erase(std::unique(rings.begin(), rings.end()), rings.end());
  int32 done = 0;
  for (const int32 ring : rings) {
    std::vector<int64> ring_ids;
    std::vector<int32> ring_attempts;
    std::vector<pg::job_ring::Lease> ring_leases;
    for (int i = 0; i < count; ++i) {
      if (leases[i].ring_id != ring) continue;
      ring_ids.push_back(ids[i]);
      ring_attempts.push_back(attempts[i]);
      ring_leases.push_back(leases[i]);
    }
    done += CompleteManyOnRing(spi, queue_id, ring_leases[0], ring_ids.data(), ring_attempts.data(),
                               ring_leases.data(), static_cast<int>(ring_ids.size()), now);
  }
  return done;
}

std::optional<TimestampTz> Extend(pg::SpiSession& spi, const pg::job_ring::Lease& lease, int64 id,
                                  int32 attempt, TimestampTz lease_until) {
  pg::job_ring::Place place;
  if (!RingOfLease(spi, lease, &place)) return std::nullopt;
  // Another transaction's close of it in progress (it took the lease out
  // after Running's look): its end says whether the lease holds again.
  for (;;) {
    TransactionId closer = InvalidTransactionId;
    if (pg::job_ring::Extend(place, id, attempt, pg::Now(), lease_until, &closer)) {
      return lease_until;
    }
    if (!TransactionIdIsValid(closer)) return std::nullopt;
    pg::job_ring::WaitForCloser(closer);
  }
}

bool MoveToTable(pg::SpiSession& spi, const pg::job_ring::Lease& lease, int64 id, int32 attempt,
                 TimestampTz now) {
  pg::job_ring::Place place;
  if (!RingOfLease(spi, lease, &place)) return false;
  pg::job_ring::NewEntry entry;
  if (!pg::job_ring::ReadEntry(lease, &entry)) return false;
  if (!CloseWaiting(place, id, attempt, 'm', now)) return false;
  // A parent moves with its children's rows marked on it: the table's end
  // of it (a completion, a failure, a cancel) settles them.
  const bool has_dependents = !ParentsAmong(spi, place, {id}).empty();
  InsertRunning(spi, lease.queue_id, entry, attempt, lease.lease_until, lease.claimed_at,
                has_dependents, lease.claimed_by);
  // Its row counts it in its group from now on.
  if (lease.grouped) (void)internal::LetGroupsGo(spi, {id});
  return true;
}

namespace {

// A running ring job's end that leaves the ring: (id, attempt) taken out
// of the lease map under its closure `outcome` (false, nothing written, if
// another attempt holds it), its entry read first (while the lease holds,
// its segment stays), and whether children named it (ParentsAmong: they
// follow it into the table, or fail with it).
struct Left {
  pg::job_ring::NewEntry entry;
  bool has_dependents;
};
// A grouped job that left the ring: its hold goes, and, if it left the
// group (done, dead, cancelled), its group moves on under the group's lock.
// One requeued into pgq.job_rows is its group's head there: its row counts
// it from the same commit as the hold goes, the group has no more room
// than before, and no lock is taken (the maintenance's expiry never waits
// for a producer's open transaction on the group).
// `joining`: the groups of followers its key let in (Bury), moved on in the
// same call.
void LeftGroup(pg::SpiSession& spi, const pg::job_ring::Lease& lease, int64 id, bool requeued,
               std::vector<internal::GroupRef> joining = {}) {
  std::vector<internal::GroupRef> groups;
  if (lease.grouped) groups = internal::LetGroupsGo(spi, {id});
  if (requeued) return;
  for (internal::GroupRef& group : joining) groups.push_back(std::move(group));
  if (!groups.empty()) internal::MoveGroupsOn(spi, std::move(groups));
}

bool Leave(pg::SpiSession& spi, const pg::job_ring::Lease& lease, int64 id, int32 attempt,
           char outcome, TimestampTz now, Left* left) {
  pg::job_ring::Place place;
  if (!RingOfLease(spi, lease, &place)) return false;
  if (!pg::job_ring::ReadEntry(lease, &left->entry)) return false;
  if (!CloseWaiting(place, id, attempt, outcome, now)) return false;
  left->has_dependents = !ParentsAmong(spi, place, {id}).empty();
  pg::ledger::NoteLeftRunning(lease.queue_id);
  return true;
}

// Its next claim, a pending row of pgq.job_rows due at `run_at`, with
// `spent` attempts spent and `error` (0: none) as last_error; the claim
// hints told (`wake`: its queue's waiting claims woken at commit).
void Requeue(const pg::job_ring::Lease& lease, const Left& left, int32 spent, TimestampTz run_at,
             Datum error, bool wake, bool keep_lease = false) {
  const Catalog& catalog = InstalledCatalog();
  if (!internal::CanInsertJobRow(catalog)) {
    pg::Raise(ERRCODE_INTERNAL_ERROR, "pgq.job_rows lacks a column of this version");
  }
  internal::JobRow row;
  row.id = left.entry.id;
  row.queue_id = lease.queue_id;
  row.priority = left.entry.priority;
  row.run_at = run_at;
  row.attempt = spent;
  row.max_attempts = left.entry.max_attempts;
  row.enqueued_at = left.entry.enqueued_at;
  row.payload = left.entry.payload;
  row.last_error = error;
  row.has_dependents = left.has_dependents;
  row.claimed_at = lease.claimed_at;
  row.claimed_by = lease.claimed_by;
  if (keep_lease) row.lease_until = lease.lease_until;
  row.group_key = left.entry.group_key;
  row.dedupe_key = left.entry.dedupe_key;
  row.dedupe_for = left.entry.dedupe_for;
  row.trace_context = left.entry.trace_context;
  internal::InsertJobRow(catalog, row);
  pg::ledger::NotePending(lease.queue_id, core::ClaimKey{row.priority, row.run_at, row.id}, wake);
}

// Its dead-letter row, its dependents failed with it; the groups of the
// followers its key let in (for LeftGroup).
std::vector<internal::GroupRef> Bury(pg::SpiSession& spi, const pg::job_ring::Lease& lease,
                                     const Left& left, int64 id, int32 attempt, Datum error,
                                     DeathOf death, TimestampTz now) {
  pg::Params dead;
  dead.Set(0, Int64GetDatum(id))
      .Set(1, Int32GetDatum(lease.queue_id))
      .Set(2, left.entry.payload)
      .Set(3, Int32GetDatum(attempt))
      .Set(4, Int32GetDatum(left.entry.priority))
      .Set(5, Int32GetDatum(left.entry.max_attempts))
      .Set(6, TimestampTzGetDatum(left.entry.enqueued_at))
      .SetOptional(7, error == 0, error)
      .Set(8, TimestampTzGetDatum(now))
      .SetOptional(9, left.entry.group_key == 0, left.entry.group_key)
      .SetOptional(10, left.entry.dedupe_key == 0, left.entry.dedupe_key)
      .SetOptional(11, left.entry.dedupe_for == 0, left.entry.dedupe_for)
      .SetOptional(12, left.entry.trace_context == 0, left.entry.trace_context);
  const pg::Result buried = spi.Execute(bury_job(death), dead);
  // Its key goes with it (or stays for its period; a follower takes it).
  std::vector<internal::GroupRef> joining;
  if (left.entry.dedupe_key != 0) joining = internal::KeysReleased(spi, buried, now);
  internal::CountDead(lease.queue_id);
  if (left.has_dependents) internal::ParentsDied(spi, std::vector<int64>{id}, now);
  return joining;
}

}  // namespace

FailOutcome Fail(pg::SpiSession& spi, const pg::job_ring::Lease& lease, int64 id, int32 attempt,
                 Datum error, int64 retry_in_us, TimestampTz now) {
  Left left;
  if (!Leave(spi, lease, id, attempt, 'f', now, &left)) return FailOutcome::kLost;
  pg::ledger::NoteCount(lease.queue_id, pg::kFailures, 1);
  if (attempt < left.entry.max_attempts) {
    // Due later: no wake-up now, but the claim hint must come back to it.
    Requeue(lease, left, attempt, pg::AddMicros(now, retry_in_us, "retry_in"), error,
            retry_in_us == 0);
    LeftGroup(spi, lease, id, true);
    return FailOutcome::kRetry;
  }
  LeftGroup(spi, lease, id, false,
            Bury(spi, lease, left, id, attempt, error, DeathOf::kExhausted, now));
  return FailOutcome::kDead;
}

bool CancelRunning(pg::SpiSession& spi, const pg::job_ring::Lease& lease, int64 id,
                   TimestampTz now) {
  Left left;
  if (!Leave(spi, lease, id, lease.attempt, 'x', now, &left)) return false;
  LeftGroup(spi, lease, id, false,
            Bury(spi, lease, left, id, lease.attempt, 0, DeathOf::kCancelled, now));
  return true;
}

bool GiveBack(pg::SpiSession& spi, const pg::job_ring::Lease& lease, int64 id, int32 attempt,
              std::optional<TimestampTz> run_at, bool wake) {
  Left left;
  const TimestampTz now = pg::Now();
  if (!Leave(spi, lease, id, attempt, run_at ? 's' : 'r', now, &left)) return false;
  Requeue(lease, left, attempt - 1, run_at.value_or(left.entry.run_at), left.entry.last_error,
          wake);
  LeftGroup(spi, lease, id, true);
  return true;
}

namespace {
// The ring's unfinished jobs, pending or running, as every reader counts
// them (a job moved into pgq.job_rows is closed: counted there).
pg::Statement unfinished_on_ring = {
    "SELECT count(*) AS jobs FROM pgq.ring_jobs WHERE ring = $1", 1, {INT4OID}, nullptr};
}  // namespace

int64 Unfinished(pg::SpiSession& spi, int32 queue_id) {
  int64 jobs = 0;
  for (const QueueRing& ring : RingsOf(spi, queue_id)) {
    pg::Params params;
    params.Set(0, Int32GetDatum(ring.ring_id));
    jobs += spi.Execute(unfinished_on_ring, params).Int64(0, "jobs");
  }
  return jobs;
}

Expired ExpireOnRings(pg::SpiSession& spi, TimestampTz now, int32 batch) {
  EnsureLanes(spi);
  Expired expired{0, 0};
  std::vector<std::pair<int64, pg::job_ring::Lease>> abandoned;
  const std::vector<std::pair<int64, pg::job_ring::Lease>> leases =
      pg::job_ring::Expired(now, batch, &abandoned);
  // Claims of prepared transactions rolled back (ROLLBACK PREPARED): their
  // leases go, their entries are handed out again.
  for (const auto& [id, lease] : abandoned) {
    pg::job_ring::Place place;
    if (!RingOfLease(spi, lease, &place)) continue;
    const auto at = std::find(place.leaves.begin(), place.leaves.end(), lease.entry_relid);
    const int segment = at == place.leaves.end() ? -1 : static_cast<int>(at - place.leaves.begin());
    if (pg::job_ring::GiveUpClaim(place, id, lease, segment)) {
      pg::ledger::NoteLeftRunning(lease.queue_id);  // a capped queue has room again
      pg::ledger::NoteReady(lease.queue_id);        // its waiting claims look again
    }
  }
  if (leases.empty()) return expired;
  const Datum error = pg::TextDatum("lease expired");
  for (const auto& [id, lease] : leases) {
    Left left;
    // Completed, failed or moved meanwhile by its holder: not expired.
    if (!Leave(spi, lease, id, lease.attempt, 'e', now, &left)) continue;
    pg::ledger::NoteCount(lease.queue_id, pg::kLeaseExpiries, 1);
    const bool requeue = lease.attempt < left.entry.max_attempts;
    std::vector<internal::GroupRef> joining;
    if (requeue) {
      // In its old place in the claim order, at once; its lease_until kept
      // (the marker that lets a late completion of the expired claim land).
      Requeue(lease, left, lease.attempt, left.entry.run_at, error, true, true);
      ++expired.requeued;
    } else {
      joining = Bury(spi, lease, left, id, lease.attempt, error, DeathOf::kExpired, now);
      ++expired.dead;
    }
    LeftGroup(spi, lease, id, requeue, std::move(joining));
  }
  return expired;
}

namespace {
// The entry of a job of a queue's ring that no claim has taken (no receipt)
// and nothing closed. $1 the id, $2 a ring id: that ring alone is read
// (its equality prunes the other rings' partitions).
pg::Statement pending_entry = {R"sql(
SELECT q.queue_id, q.ring_id, l.tableoid AS relid, l.ctid AS entry, l.attempt
  FROM pgq.job_log l JOIN pgq.queue_rings q ON q.ring_id = l.ring
 WHERE l.id = $1 AND l.kind = 'e' AND l.ring = $2
   AND NOT EXISTS (SELECT 1 FROM pgq.job_log c
                    WHERE c.ring = $2 AND c.id = l.id AND c.kind IN ('r', 'c')))sql",
                               2,
                               {INT8OID, INT4OID},
                               nullptr};

// The same in every ring ($1 the id), for a caller who holds a right on
// every queue: one statement, each ring read once.
pg::Statement pending_entry_anywhere = {R"sql(
SELECT q.queue_id, q.ring_id, l.tableoid AS relid, l.ctid AS entry, l.attempt
  FROM pgq.job_log l JOIN pgq.queue_rings q ON q.ring_id = l.ring
 WHERE l.id = $1 AND l.kind = 'e'
   AND NOT EXISTS (SELECT 1 FROM pgq.job_log c
                    WHERE c.ring = l.ring AND c.id = l.id AND c.kind IN ('r', 'c')))sql",
                                        1,
                                        {INT8OID},
                                        nullptr};

pg::Statement rings_in_scope = {
    "SELECT queue_id, priority, ring_id FROM pgq.queue_rings WHERE ($1 OR queue_id = ANY ($2))"
    " ORDER BY queue_id, priority DESC",
    2,
    {BOOLOID, INT4ARRAYOID},
    nullptr};
}  // namespace

std::vector<QueueRing> RingsIn(pg::SpiSession& spi, const Scope& scope) {
  pg::Params params;
  internal::SetScope(params, 0, scope);
  pg::Result rows = spi.Execute(rings_in_scope, params);
  std::vector<QueueRing> rings;
  rings.reserve(rows.size());
  for (uint64 row = 0; row < rows.size(); ++row) {
    rings.push_back(QueueRing{rows.Int32(row, "queue_id"), rows.Int32(row, "priority"),
                              rows.Int32(row, "ring_id")});
  }
  rows.Free();
  return rings;
}

namespace {

// The entry of `id` if it is a job of a queue in `scope` still in its ring
// (no receipt or closure committed; a full read of each ring of the scope's
// queues, one at a time until it is found, so that one team's lookup never
// reads another's rings; every ring in one statement for a scope of every
// queue).
bool FindPending(pg::SpiSession& spi, const Scope& scope, int64 id, TakenOut* out,
                 ItemPointerData* entry) {
  if (!pg::job_ring::Available()) return false;
  pg::Result found;
  pg::Params params;
  params.Set(0, Int64GetDatum(id));
  if (scope.every) {
    found = spi.Execute(pending_entry_anywhere, params, 1);
  } else {
    for (const QueueRing& ring : RingsIn(spi, scope)) {
      params.Set(1, Int32GetDatum(ring.ring_id));
      found = spi.Execute(pending_entry, params, 1);
      if (!found.empty()) break;
    }
  }
  if (found.empty()) return false;
  bool is_null = false;
  const Oid relid = DatumGetObjectId(found.Value(0, "relid", &is_null));
  *entry = *reinterpret_cast<ItemPointer>(DatumGetPointer(found.Value(0, "entry", &is_null)));
  out->queue_id = found.Int32(0, "queue_id");
  out->ring_id = found.Int32(0, "ring_id");
  out->attempts = found.Int32(0, "attempt");
  found.Free();
  const Known* rings = KnownOf(spi, out->queue_id);
  const KnownRing* ring = rings == nullptr ? nullptr : rings->WithId(out->ring_id);
  if (ring == nullptr) return false;
  const auto& leaves = ring->place.leaves;
  const auto at = std::find(leaves.begin(), leaves.end(), relid);
  if (at == leaves.end()) return false;
  out->segment = static_cast<int>(at - leaves.begin());
  out->place = ring->place;
  out->relid = relid;
  out->entry = *entry;
  return true;
}

}  // namespace

pg::job_ring::TombstoneOutcome TakeOutPending(pg::SpiSession& spi, const Scope& scope, int64 id,
                                              TakenOut* out, TransactionId* wait_for) {
  using pg::job_ring::TombstoneOutcome;
  ItemPointerData entry;
  if (!FindPending(spi, scope, id, out, &entry)) return TombstoneOutcome::kNotPending;
  // The segment is locked first: a truncation waits for the closure.
  pg::Guard([&] { LockRelationOid(out->place.leaves[out->segment], RowExclusiveLock); });
  return pg::job_ring::Tombstone(out->place, id, out->segment, entry, out->attempts + 1, wait_for);
}

namespace {

// What a child's enqueue finds of a ring job it names.
enum class ParentSeen { kNone, kUnfinished, kEnding };

// `id` on a ring, for a job of `scope`: running (its lease held, or its
// claim in progress), pending (its entry, no receipt or closure committed),
// or ending (a completion, move or cancel of it in progress: `ending`).
// `queue_id`: its queue's.
// `at`: where its entry is (entry_relid and entry set).
ParentSeen LookAtParent(pg::SpiSession& spi, const Scope& scope, int64 id, TransactionId* ending,
                        int32* queue_id, pg::job_ring::Lease* at) {
  pg::job_ring::Lease lease;
  if (pg::job_ring::FindLease(id, &lease, ending) &&
      pg::Guard([&] { return InScope(scope, lease.queue_id); })) {
    *queue_id = lease.queue_id;
    *at = lease;
    return TransactionIdIsValid(*ending) ? ParentSeen::kEnding : ParentSeen::kUnfinished;
  }
  TakenOut pending;
  ItemPointerData entry;
  if (!FindPending(spi, scope, id, &pending, &entry)) return ParentSeen::kNone;
  *queue_id = pending.queue_id;
  at->entry_relid = pending.relid;
  at->entry = entry;
  *ending = pg::job_ring::CancelInProgress(pending.place, pending.segment, entry);
  return TransactionIdIsValid(*ending) ? ParentSeen::kEnding : ParentSeen::kUnfinished;
}

}  // namespace

std::vector<int64> HoldParents(pg::SpiSession& spi, const Scope& scope,
                               const std::vector<int64>& ids,
                               std::vector<std::string>* traceparents) {
  std::vector<int64> held;
  if (!pg::job_ring::Available() || ids.empty()) return held;
  EnsureLanes(spi);
  for (const int64 id : ids) {
    for (;;) {
      TransactionId ending = InvalidTransactionId;
      int32 queue_id = 0;
      pg::job_ring::Lease at{};
      if (LookAtParent(spi, scope, id, &ending, &queue_id, &at) == ParentSeen::kNone) break;
      // As an enqueue into it does: a drop_queue of the parent's queue
      // waits for this transaction (and fails its children), or this
      // enqueue waits for the drop and finds the parent gone.
      pg::LockQueueShared(queue_id);
      // Noted in its queue's lane before the look that counts (below,
      // under the lock): whoever ends the job after it takes the lock
      // exclusively, waits for this transaction, and sees its child.
      const Known* rings = KnownOf(spi, queue_id);
      if (rings == nullptr) break;
      // In every ring of the queue: which one holds the job is known only
      // from the look that counts.
      const std::vector<KnownRing> each = rings->rings;
      for (const KnownRing& ring : each) pg::job_ring::NoteDependents(ring.place);
      // Held already (an earlier child in this transaction): whoever ends
      // the job waits for this transaction, whatever it is doing now.
      const bool held_before = pg::RingParentHeld(id);
      pg::LockRingParent(id, false);
      const ParentSeen seen = LookAtParent(spi, scope, id, &ending, &queue_id, &at);
      if (seen == ParentSeen::kUnfinished || (held_before && seen == ParentSeen::kEnding)) {
        held.push_back(id);
        // Its entry, held: read for its trace context (one page).
        pg::job_ring::NewEntry entry{};
        if (traceparents != nullptr && pg::job_ring::ReadEntry(at, &entry) &&
            entry.trace_context != 0) {
          traceparents->emplace_back(pg::ContextParts(entry.trace_context).traceparent);
        }
        break;
      }
      // Its end in progress may have looked for children before the note:
      // wait for it (not holding the lock it may wait for) and look again.
      pg::UnlockRingParent(id);
      if (seen == ParentSeen::kNone) break;
      WaitFor(ending);
    }
  }
  return held;
}

void WaitFor(TransactionId xid) {
  pg::Guard([&] { XactLockTableWait(xid, nullptr, nullptr, XLTW_None); });
}

bool WaitForClaim(pg::SpiSession& spi, const Scope& scope, int64 id) {
  pg::job_ring::Lease lease;
  // Only a job of the caller's queues: another team's claim in flight is
  // neither waited for nor told apart from a job that does not exist.
  if (!Running(spi, scope, id, &lease)) return false;
  const TransactionId xid = lease.claim_xid;
  return pg::Guard([&] {
    if (!TransactionIdIsValid(xid) || TransactionIdIsCurrentTransactionId(xid) ||
        !TransactionIdIsInProgress(xid)) {
      return false;
    }
    XactLockTableWait(xid, nullptr, nullptr, XLTW_None);
    return true;
  });
}

void CloseTakenOut(const TakenOut& taken, int64 id, TimestampTz now, char outcome) {
  // The attempt it would have had: the readers take it as finished.
  pg::job_ring::CloseEntry(taken.place, taken.segment, id, taken.attempts + 1, outcome, now);
}

bool ReplacePending(pg::SpiSession& spi, const Queue& queue, int64 id, const NewJob& job) {
  if (queue.ring_id == 0 || !pg::job_ring::Available()) return false;
  const Scope scope{false, internal::Int4Array({queue.id})};
  // As Cancel does (dead.cpp): a claim or cancel of it in progress is waited
  // for, then it is looked for again. Running (its lease in the map, read
  // without reading the ring): a follower's, not a replace.
  for (int round = 0; round < 4; ++round) {
    if (WaitForClaim(spi, scope, id)) continue;
    if (pg::job_ring::Lease lease; Running(spi, scope, id, &lease)) return false;
    TakenOut taken;
    TransactionId other = InvalidTransactionId;
    const auto outcome = TakeOutPending(spi, scope, id, &taken, &other);
    if (outcome == pg::job_ring::TombstoneOutcome::kWait) {
      WaitFor(other);
      continue;
    }
    if (outcome == pg::job_ring::TombstoneOutcome::kTombstoned) {
      pg::job_ring::Lease at{};
      at.entry_relid = taken.relid;
      at.entry = taken.entry;
      pg::job_ring::NewEntry entry;
      if (!pg::job_ring::ReadEntry(at, &entry)) {
        pg::Raise(ERRCODE_INTERNAL_ERROR,
                  "the ring entry of job " + std::to_string(id) + " could not be read");
      }
      const Catalog& catalog = InstalledCatalog();
      if (!internal::CanInsertJobRow(catalog)) {
        pg::Raise(ERRCODE_INTERNAL_ERROR, "pgq.job_rows lacks a column of this version");
      }
      // As replace_holder leaves a pending row (keys.cpp): the new work,
      // run_at and priority; its attempts, limit, enqueue time and key kept.
      internal::JobRow row;
      row.id = id;
      row.queue_id = queue.id;
      row.priority = job.priority;
      row.run_at = job.run_at;
      row.attempt = taken.attempts;
      row.max_attempts = entry.max_attempts;
      row.enqueued_at = entry.enqueued_at;
      row.payload = job.payload;
      row.dedupe_key = entry.dedupe_key;
      row.dedupe_for = entry.dedupe_for;
      row.trace_context = job.trace_context;
      // Children named it on the ring: the row's end settles them.
      row.has_dependents = !ParentsAmong(spi, taken.place, {id}).empty();
      internal::InsertJobRow(catalog, row);
      CloseTakenOut(taken, id, pg::Now(), 'm');
      internal::AnnounceJobs(spi, queue, core::ClaimKey{row.priority, row.run_at, row.id});
      return true;
    }
    // Not pending on a ring: claimed meanwhile (waited for, then looked at
    // again), else a row, or gone.
    if (!WaitForClaim(spi, scope, id)) return false;
  }
  return false;
}

namespace {

bool LockedExclusively(Oid relid) {
  return pg::Guard([&] {
    LOCKTAG tag;
    SET_LOCKTAG_RELATION(tag, MyDatabaseId, relid);
    return LockHeldByMe(&tag, AccessExclusiveLock);
  });
}

// Whether every committed entry of the segment has its closure, read under a
// share lock taken without waiting and let go at once (no closure is written
// meanwhile): before the exclusive lock, whose acquisition takes a
// transaction id and logs it — every pass, while a sealed segment still
// holds a live job, the idle passes wrote WAL. False when busy.
bool ClosedUnderShareLock(Oid relid) {
  if (!pg::Guard([&] { return ConditionalLockRelationOid(relid, ShareLock); })) return false;
  const bool closed = pg::job_ring::AllClosed(relid);
  pg::Guard([&] { UnlockRelationOid(relid, ShareLock); });
  return closed;
}
}  // namespace

// Running jobs carried out of a segment a pass, at most (the next pass
// carries on).
constexpr int kCarryBatch = 1000;

namespace {

// How long the maintenance waits for pgq.job_log before it leaves giving
// rings to its next pass.
constexpr int kRootLockWaitMs = 100;

pg::Statement queues_without_ring = {
    "SELECT q.name FROM pgq.queues q WHERE q.ring_id IS NULL ORDER BY q.queue_id LIMIT 100",
    0,
    {},
    nullptr};

}  // namespace

int GiveRings(pg::SpiSession& spi, TimestampTz now) {
  pg::Params none;
  pg::Result rows = spi.Execute(queues_without_ring, none);
  std::vector<std::string> names;
  for (uint64 row = 0; row < rows.size(); ++row) names.emplace_back(rows.Text(row, "name"));
  rows.Free();
  // A new ring is attached to pgq.job_log under SHARE UPDATE EXCLUSIVE
  // until the pass commits: not while a create_queue left open holds it,
  // which the pass would wait for; the next pass tries again.
  if (names.empty() ||
      !pg::segments::TryLockRoot(kRoot, kRootLockWaitMs, ShareUpdateExclusiveLock)) {
    return 0;
  }
  for (const std::string& name : names) GiveQueueRing(spi, name, now);
  // Cached queues learn their rings at the commit (store/queues.h).
  if (!names.empty()) pg::invalidation::Announce(pg::invalidation::kQueues);
  return static_cast<int>(names.size());
}

namespace {

// A ring for (queue, priority) if the queue has a ring, room for another
// priority (kMaxPriorities) and none of it, and the database has fewer
// rings than its share of lanes ($4): a ring's entries are handed out only
// through a lane, and a ring that cannot get one (the share held by rings
// with running jobs) waits, so priorities get rings only while every ring
// of the database could have a lane at once; past that their jobs stay
// rows. Under the queue's lock (taken without waiting: a drop of it then
// waits for the pass; a drop left open is not waited for) and pgq.job_log's
// SHARE UPDATE EXCLUSIVE (held by the caller: no other ring is made
// meanwhile, so the counts are exact).
pg::Statement add_priority_ring = {
    "INSERT INTO pgq.priority_rings (queue_id, priority, ring_id)"
    " SELECT $1, $2, pg_catalog.nextval('pgq.stream_id_seq')::int4"
    "  WHERE EXISTS (SELECT 1 FROM pgq.queues WHERE queue_id = $1 AND ring_id IS NOT NULL)"
    "    AND (SELECT count(*) FROM pgq.queue_rings WHERE queue_id = $1) < $3"
    "    AND (SELECT count(*) FROM pgq.queue_rings) < $4"
    " ON CONFLICT DO NOTHING RETURNING ring_id",
    4,
    {INT4OID, INT4OID, INT4OID, INT4OID},
    nullptr};

// The rings enqueues asked for (pg/queue_slots.h WantPriorityRing), of the
// queues of `queues`; how many were made.
int GivePriorityRings(pg::SpiSession& spi, const std::vector<std::pair<int32, int32>>& queues,
                      TimestampTz now) {
  std::vector<std::pair<int32, int32>> wanted;  // (queue, priority)
  for (size_t i = 0; i < queues.size(); ++i) {
    const int32 queue_id = queues[i].first;
    if (i > 0 && queues[i - 1].first == queue_id) continue;
    pg::QueueSlot* slot = pg::FindQueueSlot(queue_id);
    if (const std::optional<int32> priority = pg::TakeWantedPriorityRing(slot)) {
      wanted.emplace_back(queue_id, *priority);
    }
  }
  if (wanted.empty()) return 0;
  // As GiveRings: not while a create_queue left open holds the root; asked
  // again for the next pass.
  if (!pg::segments::TryLockRoot(kRoot, kRootLockWaitMs, ShareUpdateExclusiveLock)) {
    for (const auto& [queue_id, priority] : wanted) {
      pg::WantPriorityRing(pg::FindQueueSlot(queue_id), priority);
    }
    return 0;
  }
  int made = 0;
  for (const auto& [queue_id, priority] : wanted) {
    // Not waited for: a transaction that holds the queue's lock exclusively
    // (a drop_queue left open) would hold up the database's maintenance,
    // every team's; asked again for the next pass.
    if (!pg::TryLockQueueShared(queue_id)) {
      pg::WantPriorityRing(pg::FindQueueSlot(queue_id), priority);
      continue;
    }
    pg::Params params;
    params.Set(0, Int32GetDatum(queue_id))
        .Set(1, Int32GetDatum(priority))
        .Set(2, Int32GetDatum(kMaxPriorities))
        .Set(3, Int32GetDatum(pg::MaxRingQueuesPerDatabase()));
    const pg::Result added = spi.Execute(add_priority_ring, params);
    if (added.empty()) continue;
    CreateRing(spi, added.Int32(0, "ring_id"), now);
    ++made;
  }
  // Cached queues learn their rings at the commit.
  if (made > 0) pg::invalidation::Announce(pg::invalidation::kQueues);
  return made;
}

}  // namespace

MaintainCounts Maintain(pg::SpiSession& spi, TimestampTz now) {
  MaintainCounts counts;
  counts.rings_given = GiveRings(spi, now);
  if (!pg::job_ring::Available()) return counts;
  std::vector<std::pair<int32, int32>> queues = RingQueues(spi);
  if (const int made = GivePriorityRings(spi, queues, now); made > 0) {
    counts.rings_given += made;
    queues = RingQueues(spi);
  }
  const int64 turn = pg::RingTurnMicros();
  for (const auto& [queue_id, ring_id] : queues) {
    pg::segments::Ring ring;
    if (!pg::segments::LoadRing(spi, kRoot, ring_id, &ring)) continue;
    pg::job_ring::Place place = PlaceFrom(queue_id, ring_id, ring);
    // Built here after a start, its lane is fair if its queue is.
    const Known* known_queue = KnownOf(spi, queue_id);
    const KnownRing* known_ring = known_queue == nullptr ? nullptr : known_queue->WithId(ring_id);
    place.fair = known_ring != nullptr && known_ring->place.fair;
    // Due to turn onto a segment still holding running jobs (a lease
    // extended past the ring's turns): they are carried into pgq.job_rows
    // (their attempt and lease kept; a closure 'm' in the segment), so that
    // the segment is truncated and the ring turns on. Pending jobs there (a
    // backlog deeper than the ring) are not: the current segment takes the
    // new ones until the backlog drains.
    const int next = (ring.current + 1) % ring.segments;
    if (now - ring.rotated_at >= turn && pg::segments::Written(ring, ring.current) &&
        pg::segments::Written(ring, next)) {
      for (const auto& [id, lease] : pg::job_ring::RunningIn(place.leaves[next], kCarryBatch)) {
        if (MoveToTable(spi, lease, id, lease.attempt, now)) ++counts.carried;
      }
    }
    // Truncated first, turned after (as a stream's ring): a segment sealed
    // by this transaction may still take the rows of its jobs.
    if (ring.sealed_with_rows) {
      // Not waited for: a claim or completion in the way has work in the
      // segment, and the next pass asks again.
      counts.truncated +=
          pg::segments::Reclaim(spi, kRoot, ring_id, 0, now, [&](Oid relid, int segment) {
            if (!pg::job_ring::MayTruncate(place, segment)) return false;
            // Asked without the exclusive lock first; the rows are read
            // again under it.
            if (!LockedExclusively(relid)) return ClosedUnderShareLock(relid);
            if (!pg::job_ring::AllClosed(relid)) return false;
            // The ledger row is locked by Reclaim: its turn is the newest.
            pg::job_ring::Place locked;
            if (!PlaceOf(spi, queue_id, ring_id, &locked)) return false;
            locked.fair = place.fair;
            return pg::job_ring::LetGo(locked, segment);
          });
    }
    // Turned when the current segment has taken entries for a turn's time
    // (an idle ring stays where it is) and the next one is empty.
    if (now - ring.rotated_at >= turn && pg::segments::Written(ring, ring.current) &&
        pg::segments::Rotate(spi, kRoot, ring_id, turn, now)) {
      ++counts.rotated;
    }
  }
  return counts;
}

}  // namespace pgq::store::ring
