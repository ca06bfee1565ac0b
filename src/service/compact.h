// Compaction of pgq.job_rows (ADR 0008): when the table is mostly dead space -
// a transaction held open for minutes, autovacuum behind - its few live rows
// are copied aside, the table is truncated and the rows are written back
// frozen, so the table and its indexes shrink to what the live jobs need
// whatever the xmin horizon.
#pragma once

#include "pg/pg.h"

namespace pgq::service {

enum class CompactOutcome {
  kNotNeeded,  // MaybeCompactJobs: the table is small or mostly live
  kCompacted,  // rewritten
  kBusy,       // the table lock was not granted within the timeout
  kTooBig,     // more live jobs than the caller allows: left to VACUUM
};

struct CompactResult {
  CompactOutcome outcome = CompactOutcome::kBusy;
  int64 jobs = 0;          // live jobs kept (kCompacted)
  int64 bytes_before = 0;  // pgq.job_rows with its indexes and TOAST
  int64 bytes_after = 0;
};

// Whether the current role owns pgq.job_rows (or is a superuser): the only ones
// that may rewrite it. The ACCESS EXCLUSIVE lock itself checks nothing.
bool MayCompactJobs();

// Whether pgq.job_rows is worth compacting now: at least pgq.compact_min_size on
// disk, of which the live jobs need at most an eighth, and the current role
// may rewrite it. Cheap: file sizes and the statistics counters, no scan.
// Sets *bytes to the table's size.
bool JobsWantCompaction(int64* bytes);

// Rewrites pgq.job_rows in a subtransaction of the current transaction, which
// must be READ COMMITTED (a snapshot older than the lock would miss jobs).
// Waits at most lock_timeout_ms for the ACCESS EXCLUSIVE lock; gives up
// (kTooBig) when the live jobs exceed max_jobs or max_bytes.
CompactResult CompactJobs(int lock_timeout_ms, int64 max_jobs, int64 max_bytes);

// What a maintenance pass runs: CompactJobs with the short lock wait and the
// small caps of an automatic rewrite, when JobsWantCompaction. Same rules.
CompactResult MaybeCompactJobs();

// The same for the rings' key tables (ADR 0028): pgq.dedupe_holds (a row
// per dedupe key taken, deleted or updated at the job's end) and
// pgq.group_holds (a row per grouped ring job), whose dead rows a held
// xmin pins as it pins pgq.job_rows': each rewritten when it is at least
// pgq.compact_min_size and mostly dead space (its live rows at 256 bytes
// each fill at most an eighth of it). How many were rewritten.
int MaybeCompactHolds();

}  // namespace pgq::service
