// Rings of segment tables: rows appended to the current segment and never
// updated, whole segments reclaimed by TRUNCATE (ADR 0020). Streams store
// their events in one ring each; the layer knows nothing of streams, so the
// leased queues can move onto the same kind of storage later.
//
// A ring is a partition of a root table of ours (pgq.stream_events),
// partitioned in turn by a `segment smallint` column into `segments` leaf
// tables: pgq.<root>_<ring>_<k>. The root is a member of the extension, the
// partitions are not: pg_dump dumps them with their rows, DROP EXTENSION
// drops them with the root. The ledger (pgq.rings, pgq.ring_segments) says
// which segment takes new rows and which are empty.
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

#include "pg/spi.h"

namespace pgq::pg::segments {

inline constexpr int kMaxSegments = 8;

// What an owner's reader needs to find a ring: the leaf tables and which
// one takes new rows. Read from the catalogs and the ledger.
struct Ring {
  int32 ring_id = 0;
  int segments = 0;
  int current = 0;
  int64 generation = 0;
  Oid parent = InvalidOid;  // pgq.<root>_<ring>
  Oid leaves[kMaxSegments] = {};
};

// Creates ring `ring_id` under pgq.<root> (partitioned by LIST of its first
// column, which holds the ring id): its tables, an index on `index_columns`
// ("(txid, id)") of each segment, and its ledger rows with segment 0
// current. `root` and `index_columns` are ours, never a user's value.
void CreateRing(SpiSession& spi, const char* root, int32 ring_id, int segments,
                const char* index_columns, TimestampTz now);

// Drops the ring's tables and ledger rows; waits for the readers and
// writers of its segments.
void DropRing(SpiSession& spi, const char* root, int32 ring_id);

// The ring as the ledger and the catalogs say now; false if it has no
// ledger row (dropped).
bool LoadRing(SpiSession& spi, const char* root, int32 ring_id, Ring* ring);

// The name of the ring's table (segment -1) or of one of its segments,
// schema-qualified, for statements of the owner.
std::string TableName(const char* root, int32 ring_id, int segment = -1);

// Turns the ring when its current segment has been current `period_us` or
// longer and the next one is empty: the next one takes new rows from the
// commit on. Skips a ring another transaction is turning or reclaiming.
// Announces it (a change of pgq.rings, pg/invalidation.h), so that writers
// read the ring again. True if it turned.
bool Rotate(SpiSession& spi, const char* root, int32 ring_id, int64 period_us, TimestampTz now);

// Truncates the ring's sealed segments whose rows `finished(segment_relid,
// segment)` says no reader needs any more (asked with the latest snapshot,
// under the segment's ACCESS EXCLUSIVE lock, waited for at most
// `lock_wait_ms`: a reader or writer in the way makes it skip that segment
// until the next call). Returns how many it truncated.
template <typename Finished>
int Reclaim(SpiSession& spi, const char* root, int32 ring_id, int lock_wait_ms, TimestampTz now,
            Finished&& finished);

// The parts of Reclaim that are not a template.
namespace detail {
struct Sealed {
  int segment;
  Oid relid;
};
// The ring's sealed segments with rows, oldest first (no lock: an idle
// pass takes no transaction id).
void ListSealed(SpiSession& spi, int32 ring_id, const char* root, Sealed* out, int* count);
// Locks the ring's ledger row (SKIP LOCKED: false if another transaction
// holds it) and says whether `segment` is still sealed with rows.
bool LockStillSealed(SpiSession& spi, int32 ring_id, int segment);
// ACCESS EXCLUSIVE on `relid`, waiting at most `wait_ms`; false if not had.
bool TryLockExclusive(Oid relid, int wait_ms);
void Truncate(SpiSession& spi, const char* root, int32 ring_id, int segment, TimestampTz now);
}  // namespace detail

template <typename Finished>
int Reclaim(SpiSession& spi, const char* root, int32 ring_id, int lock_wait_ms, TimestampTz now,
            Finished&& finished) {
  detail::Sealed sealed[kMaxSegments];
  int count = 0;
  detail::ListSealed(spi, ring_id, root, sealed, &count);
  int truncated = 0;
  for (int i = 0; i < count; ++i) {
    // Asked first without a lock: a reader that is behind keeps the
    // segment, and waiting for the lock would stall the stream's readers
    // and writers for nothing.
    if (!finished(sealed[i].relid, sealed[i].segment)) continue;
    if (!detail::LockStillSealed(spi, ring_id, sealed[i].segment)) continue;
    if (!detail::TryLockExclusive(sealed[i].relid, lock_wait_ms)) continue;
    // INVARIANT: asked again once the lock is held, with the latest
    // snapshot (SpiSession::ExecuteSeeingLatest, whatever the isolation
    // level): it sees every row the segment holds until the truncation
    // commits.
    if (!finished(sealed[i].relid, sealed[i].segment)) continue;
    detail::Truncate(spi, root, ring_id, sealed[i].segment, now);
    ++truncated;
  }
  return truncated;
}

}  // namespace pgq::pg::segments
