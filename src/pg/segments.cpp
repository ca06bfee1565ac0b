#include "pg/segments.h"

#include <utility>
#include <vector>

#include "pg/args.h"
#include "pg/boundary.h"
#include "pg/invalidation.h"

extern "C" {
#include "catalog/namespace.h"
#include "catalog/pg_inherits.h"
#include "access/relation.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "utils/array.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/resowner.h"
}

namespace pgq::pg::segments {

namespace {

pg::Statement insert_ledger = {R"sql(
WITH ring AS (
  INSERT INTO pgq.rings (ring_id, segments, current, generation, rotated_at)
  VALUES ($1, $2, 0, 0, $3))
INSERT INTO pgq.ring_segments (ring_id, segment, empty, opened_at)
SELECT $1, g::int2, g <> 0, CASE WHEN g = 0 THEN $3 END
  FROM generate_series(0, $2 - 1) AS g)sql",
                               3,
                               {INT4OID, INT2OID, TIMESTAMPTZOID},
                               nullptr};

// $1 ring, $2 segments, $3 now, $4 bool[]: which segments have been
// written. Nothing if the ring has its row (adopted meanwhile).
pg::Statement adopt_ledger = {R"sql(
WITH ring AS (
  INSERT INTO pgq.rings (ring_id, segments, current, generation, rotated_at)
  VALUES ($1, $2, 0, 0, $3)
  ON CONFLICT (ring_id) DO NOTHING
  RETURNING ring_id)
INSERT INTO pgq.ring_segments (ring_id, segment, empty, opened_at)
SELECT ring.ring_id, g::int2, NOT (g = 0 OR ($4)[g + 1]), CASE WHEN g = 0 THEN $3 END
  FROM ring, generate_series(0, $2 - 1) AS g
ON CONFLICT (ring_id, segment) DO NOTHING)sql",
                              4,
                              {INT4OID, INT2OID, TIMESTAMPTZOID, BOOLARRAYOID},
                              nullptr};

// A dropped ring leaves the ledger at once and its tables for DropRetired.
pg::Statement retire_ring = {R"sql(
WITH gone AS (DELETE FROM pgq.rings WHERE ring_id = $2)
INSERT INTO pgq.rings_dropped (root, ring_id, dropped_at) VALUES ($1, $2, $3)
ON CONFLICT DO NOTHING)sql",
                             3,
                             {TEXTOID, INT4OID, TIMESTAMPTZOID},
                             nullptr};

pg::Statement list_retired = {
    "SELECT root, ring_id FROM pgq.rings_dropped ORDER BY root, ring_id LIMIT $1",
    1,
    {INT4OID},
    nullptr};

pg::Statement forget_retired = {"DELETE FROM pgq.rings_dropped WHERE root = $1 AND ring_id = $2",
                                2,
                                {TEXTOID, INT4OID},
                                nullptr};

pg::Statement read_ledger = {R"sql(
SELECT r.segments::int4, r.current::int4, r.generation, r.rotated_at,
       EXISTS (SELECT 1 FROM pgq.ring_segments s
                WHERE s.ring_id = r.ring_id AND s.segment <> r.current AND NOT s.empty)
  FROM pgq.rings r WHERE r.ring_id = $1)sql",
                             1,
                             {INT4OID},
                             nullptr};

// The ring, locked, and whether its next segment is empty. SKIP LOCKED: a
// ring another runner turns or reclaims is left to it.
pg::Statement lock_for_rotation = {R"sql(
SELECT r.current::int4, r.segments::int4, r.rotated_at, s.empty
  FROM pgq.rings r
  JOIN pgq.ring_segments s
    ON s.ring_id = r.ring_id AND s.segment = (r.current + 1) % r.segments
 WHERE r.ring_id = $1
   FOR UPDATE OF r SKIP LOCKED)sql",
                                   1,
                                   {INT4OID},
                                   nullptr};

// $1 ring, $2 the old current segment, $3 the new one, $4 now.
pg::Statement rotate = {R"sql(
WITH ring AS (
  UPDATE pgq.rings SET current = $3, generation = generation + 1, rotated_at = $4
   WHERE ring_id = $1)
UPDATE pgq.ring_segments
   SET empty = CASE WHEN segment = $3 THEN false ELSE empty END,
       opened_at = CASE WHEN segment = $3 THEN $4 ELSE opened_at END,
       sealed_at = CASE WHEN segment = $3 THEN NULL ELSE $4 END
 WHERE ring_id = $1 AND segment IN ($2, $3))sql",
                        4,
                        {INT4OID, INT2OID, INT2OID, TIMESTAMPTZOID},
                        nullptr};

pg::Statement list_sealed = {R"sql(
SELECT s.segment::int4, s.sealed_at
  FROM pgq.rings r JOIN pgq.ring_segments s ON s.ring_id = r.ring_id
 WHERE r.ring_id = $1 AND s.segment <> r.current AND NOT s.empty
 ORDER BY s.sealed_at NULLS FIRST)sql",
                             1,
                             {INT4OID},
                             nullptr};

// The ring locked (SKIP LOCKED: nothing when another runner holds it), and
// whether the segment is still sealed with rows.
pg::Statement lock_still_sealed = {R"sql(
SELECT s.segment <> r.current AND NOT s.empty
  FROM pgq.rings r JOIN pgq.ring_segments s ON s.ring_id = r.ring_id AND s.segment = $2
 WHERE r.ring_id = $1
   FOR UPDATE OF r SKIP LOCKED)sql",
                                   2,
                                   {INT4OID, INT2OID},
                                   nullptr};

pg::Statement mark_empty = {
    "UPDATE pgq.ring_segments SET empty = true, truncated_at = $3"
    " WHERE ring_id = $1 AND segment = $2",
    3,
    {INT4OID, INT2OID, TIMESTAMPTZOID},
    nullptr};

Oid RelidOf(const std::string& name) {
  // The name is "pgq.<table>"; the table part is looked up in schema pgq.
  const std::string table = name.substr(4);
  return Guard([&table] {
    const Oid schema = get_namespace_oid("pgq", true);
    return OidIsValid(schema) ? get_relname_relid(table.c_str(), schema) : InvalidOid;
  });
}

// ACCESS EXCLUSIVE in a subtransaction with lock_timeout: the lock moves to
// the transaction when it is had; a timeout rolls the subtransaction back.
// INVARIANT: no C++ object lives in this frame; errors longjmp out of it.
bool LockWithTimeout(Oid relid, LOCKMODE mode, int wait_ms) {
  MemoryContext caller_context = CurrentMemoryContext;
  ResourceOwner caller_owner = CurrentResourceOwner;
  volatile bool locked = false;
  char timeout[32];
  snprintf(timeout, sizeof timeout, "%d", wait_ms);
  const int guc_level = NewGUCNestLevel();
  (void)set_config_option("lock_timeout", timeout, PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE,
                          true, 0, false);
  BeginInternalSubTransaction(nullptr);
  MemoryContextSwitchTo(caller_context);
  PG_TRY();
  {
    LockRelationOid(relid, mode);
    ReleaseCurrentSubTransaction();
    MemoryContextSwitchTo(caller_context);
    CurrentResourceOwner = caller_owner;
    locked = true;
  }
  PG_CATCH();
  {
    MemoryContextSwitchTo(caller_context);
    ErrorData* error = CopyErrorData();
    FlushErrorState();
    RollbackAndReleaseCurrentSubTransaction();
    MemoryContextSwitchTo(caller_context);
    CurrentResourceOwner = caller_owner;
    if (error->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE) ReThrowError(error);
    FreeErrorData(error);
  }
  PG_END_TRY();
  AtEOXact_GUC(true, guc_level);
  return locked;
}

// Adopting a ring: an advisory lock (ring id, "pgqc", 7) held until the
// transaction ends, taken without waiting, so that two maintenance runners
// never wait on each other's ledger insert (the second skips).
constexpr uint32 kPgqLockSpace = 0x70677163;  // "pgqc", as pg/queue_lock.cpp
constexpr uint16 kAdoptLockKind = 7;          // 3-5: pg/queue_lock.cpp, 6: consumer_guard.cpp

bool TryLockAdoption(int32 ring_id) {
  LOCKTAG tag;
  SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, static_cast<uint32>(ring_id), kPgqLockSpace,
                       kAdoptLockKind);
  return Guard([&tag] { return LockAcquire(&tag, ExclusiveLock, false, true); }) !=
         LOCKACQUIRE_NOT_AVAIL;
}

// The ring's table (segment -1) or the leaf of its segment `segment` (0 ..
// segments - 1), schema-qualified.
std::string NameIn(const Place& place, int segment) {
  std::string name = "pgq." + place.table;
  if (segment >= 0) name += "_" + std::to_string(place.first + segment);
  return name;
}

}  // namespace

Place PlaceOf(const char* root, int32 ring_id) {
  return Place{std::string(root) + "_" + std::to_string(ring_id), 0};
}

std::string TableName(const char* root, int32 ring_id, int segment) {
  return NameIn(PlaceOf(root, ring_id), segment);
}

bool TryLockRoot(const char* root, int wait_ms, LOCKMODE mode) {
  const Oid relid = RelidOf(std::string("pgq.") + root);
  return OidIsValid(relid) && detail::TryLock(relid, mode, wait_ms);
}

void CreateRing(SpiSession& spi, const char* root, int32 ring_id, int segments,
                std::initializer_list<const char*> indexes, TimestampTz now,
                const char* leaf_options) {
  if (segments < 2 || segments > kMaxSegments) {
    Raise(ERRCODE_INTERNAL_ERROR, "a ring has 2 to " + std::to_string(kMaxSegments) + " segments");
  }
  // Made apart and attached (below), not made as a partition of the root:
  // that would lock the root ACCESS EXCLUSIVE until the transaction ends,
  // so every reader of every ring (pgq.jobs, a lookup by id) would wait
  // for an open create_queue of any team. ATTACH takes SHARE UPDATE
  // EXCLUSIVE, which only another ATTACH (or VACUUM) waits for.
  const std::string parent = TableName(root, ring_id);
  spi.ExecuteUtility("CREATE TABLE " + parent + " (LIKE pgq." + root +
                     " INCLUDING DEFAULTS INCLUDING CONSTRAINTS) PARTITION BY LIST (segment)");
  for (const char* index_columns : indexes) {
    spi.ExecuteUtility("CREATE INDEX ON " + parent + " " + index_columns);
  }
  spi.ExecuteUtility("COMMENT ON TABLE " + parent + " IS 'the ring of segments of " + root + " " +
                     std::to_string(ring_id) + " (pgq.rings says which takes new rows)'");
  for (int k = 0; k < segments; ++k) {
    // Autovacuum has nothing to do on a table rows are only appended to and
    // that is emptied by TRUNCATE (wraparound vacuums still run).
    const std::string leaf = TableName(root, ring_id, k);
    spi.ExecuteUtility(
        "CREATE TABLE " + leaf + " PARTITION OF " + parent + " FOR VALUES IN (" +
        std::to_string(k) + ") WITH (autovacuum_enabled = false, toast.autovacuum_enabled = false" +
        (leaf_options != nullptr ? std::string(", ") + leaf_options : std::string()) + ")");
    spi.ExecuteUtility("COMMENT ON TABLE " + leaf + " IS 'segment " + std::to_string(k) + " of " +
                       root + " " + std::to_string(ring_id) +
                       " (pgq.ring_segments says whether it is empty)'");
  }
  spi.ExecuteUtility("ALTER TABLE pgq." + std::string(root) + " ATTACH PARTITION " + parent +
                     " FOR VALUES IN (" + std::to_string(ring_id) + ")");
  Params params;
  params.Set(0, Int32GetDatum(ring_id))
      .Set(1, Int16GetDatum(static_cast<int16>(segments)))
      .Set(2, TimestampTzGetDatum(now));
  (void)spi.Execute(insert_ledger, params);
}

void DropRing(SpiSession& spi, const char* root, int32 ring_id, TimestampTz now) {
  Params params;
  params.Set(0, TextDatum(root)).Set(1, Int32GetDatum(ring_id)).Set(2, TimestampTzGetDatum(now));
  (void)spi.Execute(retire_ring, params);
}

namespace {

// ACCESS EXCLUSIVE on `relid` and every partition under it, each only if
// free at once; false if one was not (those had stay held to the end of
// the transaction, as the DROP would hold them).
bool TryLockTables(Oid relid) {
  return Guard([relid] {
    List* tables = find_all_inheritors(relid, NoLock, nullptr);
    bool all = true;
    ListCell* cell;
    foreach (cell, tables) {
      if (!ConditionalLockRelationOid(lfirst_oid(cell), AccessExclusiveLock)) {
        all = false;
        break;
      }
    }
    list_free(tables);
    return all;
  });
}

}  // namespace

int DropRetired(SpiSession& spi, int limit) {
  Params bound;
  bound.Set(0, Int32GetDatum(limit));
  Result rows = spi.Execute(list_retired, bound);
  std::vector<std::pair<std::string, int32>> retired;
  retired.reserve(rows.size());
  for (uint64 row = 0; row < rows.size(); ++row) {
    retired.emplace_back(rows.Text(row, "root"), rows.Int32(row, "ring_id"));
  }
  rows.Free();
  int dropped = 0;
  std::string locked_root;
  bool have_lock = false;
  for (const auto& [root, ring_id] : retired) {
    // Roots are ours (the table's CHECK); each is locked once, ACCESS
    // EXCLUSIVE as a partition's DROP takes it, and only if free at once: a
    // reader in the way keeps the tables to the next pass.
    if (root != locked_root) {
      locked_root = root;
      have_lock = TryLockRoot(root.c_str(), 0, AccessExclusiveLock);
    }
    if (!have_lock) continue;
    const std::string parent = TableName(root.c_str(), ring_id);
    const Oid parent_relid = RelidOf(parent);
    // Its own tables too, at once or not now: the DROP would otherwise wait
    // for a session that opened one of them directly, with the root locked.
    if (OidIsValid(parent_relid) && !TryLockTables(parent_relid)) continue;
    if (OidIsValid(parent_relid)) spi.ExecuteUtility("DROP TABLE " + parent);
    Params key;
    key.Set(0, TextDatum(root)).Set(1, Int32GetDatum(ring_id));
    (void)spi.Execute(forget_retired, key);
    ++dropped;
  }
  return dropped;
}

bool LoadRing(SpiSession& spi, const Place& place, int32 ring_id, Ring* ring) {
  Params params;
  params.Set(0, Int32GetDatum(ring_id));
  Result row = spi.Execute(read_ledger, params, 1);
  if (row.empty()) return false;
  Ring loaded;
  loaded.ring_id = ring_id;
  loaded.first = place.first;
  loaded.segments = row.Int32(0, 1);
  loaded.current = row.Int32(0, 2);
  loaded.generation = row.Int64(0, 3);
  bool is_null = false;
  loaded.rotated_at = DatumGetTimestampTz(row.Value(0, 4, &is_null));
  loaded.sealed_with_rows = row.Bool(0, 5);
  row.Free();
  if (loaded.segments < 2 || loaded.segments > kMaxSegments || loaded.current < 0 ||
      loaded.current >= loaded.segments) {
    Raise(ERRCODE_DATA_CORRUPTED, "ring " + std::to_string(ring_id) + " has a broken ledger row",
          "It says " + std::to_string(loaded.segments) + " segments, current " +
              std::to_string(loaded.current) + ".");
  }
  loaded.parent = RelidOf(NameIn(place, -1));
  for (int k = 0; k < loaded.segments; ++k) {
    loaded.leaves[k] = RelidOf(NameIn(place, k));
    if (!OidIsValid(loaded.leaves[k])) {
      Raise(ERRCODE_UNDEFINED_TABLE,
            "segment table " + NameIn(place, k) + " of ring " + std::to_string(ring_id) +
                " is missing",
            {}, "It was dropped by hand; drop the stream and create it again.");
    }
  }
  *ring = loaded;
  return true;
}

bool AdoptRing(SpiSession& spi, const Place& place, int32 ring_id, int segments, TimestampTz now) {
  if (segments < 2 || segments > kMaxSegments) {
    Raise(ERRCODE_INTERNAL_ERROR, "a ring has 2 to " + std::to_string(kMaxSegments) + " segments");
  }
  if (!TryLockAdoption(ring_id)) return false;
  Ring tables;
  tables.segments = segments;
  Datum written[kMaxSegments];
  for (int k = 0; k < segments; ++k) {
    tables.leaves[k] = RelidOf(NameIn(place, k));
    if (!OidIsValid(tables.leaves[k])) return false;
    written[k] = BoolGetDatum(Written(tables, k));
  }
  const Datum flags = Guard([&written, segments] {
    return PointerGetDatum(construct_array(written, segments, BOOLOID, 1, true, TYPALIGN_CHAR));
  });
  Params params;
  params.Set(0, Int32GetDatum(ring_id))
      .Set(1, Int16GetDatum(static_cast<int16>(segments)))
      .Set(2, TimestampTzGetDatum(now))
      .Set(3, flags);
  return spi.Execute(adopt_ledger, params).size() > 0;
}

bool Written(const Ring& ring, int segment) {
  const Oid relid = ring.leaves[segment];
  return Guard([relid] {
    Relation relation = relation_open(relid, AccessShareLock);
    const bool written = RelationGetNumberOfBlocks(relation) > 0;
    relation_close(relation, NoLock);
    return written;
  });
}

bool Rotate(SpiSession& spi, const Place& place, int32 ring_id, int64 period_us, TimestampTz now) {
  Params params;
  params.Set(0, Int32GetDatum(ring_id));
  Result row = spi.Execute(lock_for_rotation, params, 1);
  if (row.empty()) return false;
  const int current = row.Int32(0, 1);
  const int segments = row.Int32(0, 2);
  bool is_null = false;
  const TimestampTz rotated_at = DatumGetTimestampTz(row.Value(0, 3, &is_null));
  const bool next_empty = row.Bool(0, 4);
  row.Free();
  // A turn in the future (the clock was set back) does not hold the ring
  // for as long as the clock jumped.
  const int64 age = now - rotated_at;
  if ((age >= 0 && age < period_us) || !next_empty) return false;
  const int next = (current + 1) % segments;
  Params turn;
  turn.Set(0, Int32GetDatum(ring_id))
      .Set(1, Int16GetDatum(static_cast<int16>(current)))
      .Set(2, Int16GetDatum(static_cast<int16>(next)))
      .Set(3, TimestampTzGetDatum(now));
  (void)spi.Execute(rotate, turn);
  // Writers keep the ring in a cache; this empties it at commit.
  invalidation::Announce(invalidation::kRings);
  return true;
}

namespace detail {

void ListSealed(SpiSession& spi, int32 ring_id, const Place& place, Sealed* out, int* count) {
  Params params;
  params.Set(0, Int32GetDatum(ring_id));
  Result rows = spi.Execute(list_sealed, params);
  *count = 0;
  for (uint64 i = 0; i < rows.size() && *count < kMaxSegments; ++i) {
    const int segment = rows.Int32(i, 1);
    bool no_seal = false;
    const Datum sealed_at = rows.Value(i, 2, &no_seal);
    const Oid relid = RelidOf(NameIn(place, segment));
    if (OidIsValid(relid)) {
      out[(*count)++] = Sealed{segment, relid, no_seal ? 0 : DatumGetTimestampTz(sealed_at)};
    }
  }
  rows.Free();
}

bool LockStillSealed(SpiSession& spi, int32 ring_id, int segment) {
  Params params;
  params.Set(0, Int32GetDatum(ring_id)).Set(1, Int16GetDatum(static_cast<int16>(segment)));
  Result row = spi.Execute(lock_still_sealed, params, 1);
  const bool sealed = !row.empty() && row.Bool(0, 1);
  row.Free();
  return sealed;
}

bool TryLock(Oid relid, LOCKMODE mode, int wait_ms) {
  if (wait_ms <= 0) {
    return Guard([relid, mode] { return ConditionalLockRelationOid(relid, mode); });
  }
  return Guard([relid, mode, wait_ms] { return LockWithTimeout(relid, mode, wait_ms); });
}

void Truncate(SpiSession& spi, const Place& place, int32 ring_id, int segment, TimestampTz now) {
  spi.ExecuteUtility("TRUNCATE " + NameIn(place, segment));
  Params params;
  params.Set(0, Int32GetDatum(ring_id))
      .Set(1, Int16GetDatum(static_cast<int16>(segment)))
      .Set(2, TimestampTzGetDatum(now));
  (void)spi.Execute(mark_empty, params);
}

}  // namespace detail

}  // namespace pgq::pg::segments
