// Rewriting a table to its live rows, frozen (ADR 0008): what compaction of
// pgq.job_rows does (service/compact.h decides when). PostgreSQL internals (heap
// scans and inserts, subtransactions, resource owners) stay here.
//
// Under an ACCESS EXCLUSIVE lock the live rows are copied aside (detoasted),
// the table is TRUNCATEd (a new, empty file, whatever the xmin horizon), the
// rows are written back frozen and the indexes rebuilt. Frozen rows are
// visible to every snapshot, so a REPEATABLE READ transaction that began
// before the rewrite still sees the rows that are there (a plain
// reinsertion would show it an empty table).
#pragma once

#include "pg/pg.h"

namespace pgq::pg {

inline constexpr int64 kRewriteTooBig = -1;  // over a cap: nothing written
inline constexpr int64 kRewriteBusy = -2;    // the lock was not had in time

// Rewrites table `relid`, called `qualified_name` in SQL (schema-qualified,
// ours: never a user's value), in a subtransaction, after waiting at most
// `lock_timeout_ms` for its lock. Returns the rows kept, kRewriteTooBig when
// it holds more than `max_rows` rows or `max_bytes` bytes, or kRewriteBusy
// when the lock timed out or this session has the table in use. Any other
// error is raised.
int64 RewriteTableFrozen(Oid relid, const char* qualified_name, int lock_timeout_ms, int64 max_rows,
                         int64 max_bytes);

}  // namespace pgq::pg
