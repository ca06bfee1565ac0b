// Rings of segment tables: rows appended to the current segment and never
// updated, whole segments reclaimed by TRUNCATE (ADR 0020, ADR 0026). The
// one ring layer: streams store their events in one ring each, completed and
// dead jobs in one ring per retention class of pgq.job_history and
// pgq.dead_jobs. The layer knows nothing of streams or jobs (their owners
// say which rows are finished), so the leased queues can move onto the same
// storage later.
//
// Where a ring's rows are (Place): a table of ours, pgq.<table>, partitioned
// by LIST of a `segment smallint` column; segment k of the ring is the leaf
// pgq.<table>_<first + k>, holding the rows whose segment is first + k. A
// stream's ring has a table of its own (pgq.stream_events_<ring>, first 0),
// a partition of the root pgq.stream_events made by CreateRing; its tables
// are not members of the extension (pg_dump dumps them with their rows,
// DROP EXTENSION drops them with the root). The history and dead-letter
// rings share one table each, made by the install script, every ring a range
// of its segments (first = the ring's first segment). The ledger (pgq.rings,
// pgq.ring_segments) says which segment takes new rows and which are empty;
// a ring whose tables exist without ledger rows is adopted (AdoptRing).
//
// The life of a segment: empty -> current (rotation makes it so) -> sealed
// (the next rotation) -> empty (Reclaim truncates it once the ring's owner
// says no reader needs its rows). Rotation moves onto the next segment only
// when it is empty, so a reader that does not move holds the ring where it
// is: the current segment grows, nothing is lost.
//
// INVARIANT (no row lost to a truncation): a segment is truncated only under
// its ACCESS EXCLUSIVE lock, after the owner's check, made with a snapshot
// taken once the lock was held, found every row of it finished. Every writer
// holds ROW EXCLUSIVE on the segment it writes until it ends, so once the
// lock is held every row of the segment is committed or dead, and none can
// be added until the truncation commits. A writer with a stale idea of the
// current segment (it read the ring before a rotation) writes a sealed or
// empty segment: its rows are found by readers (they read every segment)
// and they hold that segment until they are finished like any other.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "pg/spi.h"

extern "C" {
#include "storage/lockdefs.h"
}

namespace pgq::pg::segments {

inline constexpr int kMaxSegments = 8;

// Where a ring's rows are: segment k is pgq.<table>_<first + k>, its rows'
// segment column first + k. `table` is ours (no schema), never a user's value.
struct Place {
  std::string table;
  int first = 0;
};
// A ring with a table of its own under pgq.<root> (streams): pgq.<root>_<ring_id>.
Place PlaceOf(const char* root, int32 ring_id);

// What an owner's reader needs to find a ring: the leaf tables and which
// one takes new rows. Read from the catalogs and the ledger.
struct Ring {
  int32 ring_id = 0;
  int segments = 0;
  int current = 0;  // 0 .. segments - 1; its rows' segment column is first + current
  int first = 0;
  int64 generation = 0;
  TimestampTz rotated_at = 0;
  bool sealed_with_rows = false;  // a segment other than the current one is not empty
  Oid parent = InvalidOid;        // pgq.<table>
  Oid leaves[kMaxSegments] = {};
};

// Creates ring `ring_id` under pgq.<root> (partitioned by LIST of a column
// that holds the ring id), with a table of its own, pgq.<root>_<ring_id>
// (PlaceOf): its tables, the indexes `indexes` (column lists such as
// "(txid, id)") of each segment, and its ledger rows with segment 0
// current. `root`, the indexes and `leaf_options` (more storage parameters
// of each segment, such as "vacuum_index_cleanup = off") are ours, never a
// user's value.
void CreateRing(SpiSession& spi, const char* root, int32 ring_id, int segments,
                std::initializer_list<const char*> indexes, TimestampTz now,
                const char* leaf_options = nullptr);
inline void CreateRing(SpiSession& spi, const char* root, int32 ring_id, int segments,
                       const char* index_columns, TimestampTz now) {
  CreateRing(spi, root, ring_id, segments, {index_columns}, now);
}

// `mode` on pgq.<root>, waiting at most `wait_ms` (0: not at all); false
// if not had. CreateRing attaches the ring under SHARE UPDATE EXCLUSIVE
// (only another creation waits for it, readers and writers do not); the
// DROP of a ring's tables takes ACCESS EXCLUSIVE (every reader of the root
// waits), which is why only DropRetired does it. A caller that must not
// wait behind another (the maintenance) takes the lock first.
bool TryLockRoot(const char* root, int wait_ms, LOCKMODE mode);

// Drops the ring: its ledger rows now (no writer finds it any more), its
// tables later, by DropRetired in a maintenance pass (pgq.rings_dropped
// keeps the list): a DROP of a partition would hold pgq.<root> ACCESS
// EXCLUSIVE until this transaction ends, stopping every reader of every
// ring for as long as a user's transaction that dropped a queue stays open.
void DropRing(SpiSession& spi, const char* root, int32 ring_id, TimestampTz now);

// Drops the tables of up to `limit` dropped rings, each only if its root's
// lock and its own tables' are free at once (else they wait for the next
// pass: a reader is never held up, not even for a moment). The number
// dropped.
int DropRetired(SpiSession& spi, int limit);

// The ring as the ledger and the catalogs say now; false if it has no
// ledger row (dropped).
bool LoadRing(SpiSession& spi, const Place& place, int32 ring_id, Ring* ring);
inline bool LoadRing(SpiSession& spi, const char* root, int32 ring_id, Ring* ring) {
  return LoadRing(spi, PlaceOf(root, ring_id), ring_id, ring);
}

// Ledger rows for a ring of `segments` whose tables exist (made by an
// install script) but which has none: never used, its rows deleted by
// hand, or a dump restored (the ledger rows of such rings are not dumped:
// the restoring CREATE EXTENSION would collide with them). Its first
// segment is current; a segment that has ever held a row (its file has a
// block) is marked not empty, so it is reclaimed like any sealed segment,
// never taken for empty. A segment found empty here and written since (a
// dump restored after this) is kept: it is truncated only once it has been
// current and sealed again. False if a table of the ring is missing (an
// older catalog) or another transaction adopts it at once.
bool AdoptRing(SpiSession& spi, const Place& place, int32 ring_id, int segments, TimestampTz now);

// The name of the ring's table (segment -1) or of one of its segments,
// schema-qualified, for statements of the owner.
std::string TableName(const char* root, int32 ring_id, int segment = -1);

// Turns the ring when its current segment has been current `period_us` or
// longer (or since a time still to come: the clock was set back) and the
// next one is empty: the next one takes new rows from the
// commit on. Skips a ring another transaction is turning or reclaiming.
// Announces it (a change of pgq.rings, pg/invalidation.h), so that writers
// read the ring again. True if it turned.
bool Rotate(SpiSession& spi, const Place& place, int32 ring_id, int64 period_us, TimestampTz now);
inline bool Rotate(SpiSession& spi, const char* root, int32 ring_id, int64 period_us,
                   TimestampTz now) {
  return Rotate(spi, PlaceOf(root, ring_id), ring_id, period_us, now);
}

// Whether the ring's segment `segment` (0 .. segments - 1) has ever been
// written since it was created or truncated (its file has a block): an
// owner's cheap test that a ring has something to turn for, which takes no
// transaction id.
bool Written(const Ring& ring, int segment);

// A sealed segment, as Reclaim asks its owner about it: `segment` 0 ..
// segments - 1 (its rows' segment column is the ring's first + segment),
// when it stopped being current (0: not known, an adopted ring).
struct Sealed {
  int segment;
  Oid relid;
  TimestampTz sealed_at;
};

// Truncates the ring's sealed segments whose rows `finished(segment_relid,
// segment)` (or `finished(const Sealed&)`) says no reader needs any more
// (asked with the latest snapshot, under the segment's ACCESS EXCLUSIVE
// lock, waited for at most `lock_wait_ms`, 0: not waited for; a reader or
// writer in the way makes it skip that segment until the next call).
// Returns how many it truncated.
template <typename Finished>
int Reclaim(SpiSession& spi, const Place& place, int32 ring_id, int lock_wait_ms, TimestampTz now,
            Finished&& finished);
template <typename Finished>
int Reclaim(SpiSession& spi, const char* root, int32 ring_id, int lock_wait_ms, TimestampTz now,
            Finished&& finished) {
  return Reclaim(spi, PlaceOf(root, ring_id), ring_id, lock_wait_ms, now,
                 std::forward<Finished>(finished));
}

// The parts of Reclaim that are not a template.
namespace detail {
// The ring's sealed segments with rows, oldest first (no lock: an idle
// pass takes no transaction id).
void ListSealed(SpiSession& spi, int32 ring_id, const Place& place, Sealed* out, int* count);
// Locks the ring's ledger row (SKIP LOCKED: false if another transaction
// holds it) and says whether `segment` is still sealed with rows.
bool LockStillSealed(SpiSession& spi, int32 ring_id, int segment);
// `mode` on `relid`, waiting at most `wait_ms` (0: not at all); false if
// not had.
bool TryLock(Oid relid, LOCKMODE mode, int wait_ms);
void Truncate(SpiSession& spi, const Place& place, int32 ring_id, int segment, TimestampTz now);

template <typename Finished>
bool Ask(Finished& finished, const Sealed& sealed) {
  if constexpr (std::is_invocable_v<Finished&, const Sealed&>) {
    return finished(sealed);
  } else {
    return finished(sealed.relid, sealed.segment);
  }
}
}  // namespace detail

template <typename Finished>
int Reclaim(SpiSession& spi, const Place& place, int32 ring_id, int lock_wait_ms, TimestampTz now,
            Finished&& finished) {
  Sealed sealed[kMaxSegments];
  int count = 0;
  detail::ListSealed(spi, ring_id, place, sealed, &count);
  int truncated = 0;
  for (int i = 0; i < count; ++i) {
    // Asked first without a lock: a reader that is behind keeps the
    // segment, and waiting for the lock would stall the ring's readers
    // and writers for nothing.
    if (!detail::Ask(finished, sealed[i])) continue;
    if (!detail::LockStillSealed(spi, ring_id, sealed[i].segment)) continue;
    if (!detail::TryLock(sealed[i].relid, AccessExclusiveLock, lock_wait_ms)) continue;
    // INVARIANT: asked again once the lock is held, with the latest
    // snapshot (SpiSession::ExecuteSeeingLatest, whatever the isolation
    // level): it sees every row the segment holds until the truncation
    // commits.
    if (!detail::Ask(finished, sealed[i])) continue;
    detail::Truncate(spi, place, ring_id, sealed[i].segment, now);
    ++truncated;
  }
  return truncated;
}

}  // namespace pgq::pg::segments
