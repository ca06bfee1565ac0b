// SPI with prepared plans kept for the life of the backend.
#pragma once

#include "pg/boundary.h"

namespace pgq::pg {

inline constexpr int kMaxStatementArgs = 12;

// One SQL statement of ours. Defined as static aggregates next to the code
// that runs them; prepared on first use (SPI_prepare + SPI_keepplan) and
// reused by every later call in the backend. The plan cache re-plans them by
// itself when the tables change (for instance DROP and CREATE EXTENSION).
//
// INVARIANT: `sql` holds no user value: every value is a $n parameter, and
// every table and function of ours is qualified with pgq.; everything else
// resolves in pg_catalog alone, whatever the caller's search_path (see
// CatalogOnlyPath in spi.cpp). Statements run as the owner of pgq's tables
// (ADR 0010), so a statement never calls a pgq function on a caller's
// behalf: the inner call would check the owner's rights, not the caller's
// (only the workers, whose own role is a superuser, do).
//
// Statements run with their generic plan, so they must be written for one:
// select rows to lock as `id = ANY (ARRAY(SELECT ... LIMIT $n FOR UPDATE SKIP
// LOCKED))`, not `id IN (SELECT ...)`, whose generic plan (a LIMIT $n is
// estimated at 10% of the table) hash-joins over a scan of the whole table.
struct Statement {
  const char* sql;
  int nargs;
  Oid argtypes[kMaxStatementArgs];
  SPIPlanPtr plan;
};

// Parameter values for one execution.
class Params {
 public:
  Params& Set(int index, Datum value) {
    values_[index] = value;
    nulls_[index] = ' ';
    return *this;
  }
  Params& SetNull(int index) {
    values_[index] = 0;
    nulls_[index] = 'n';
    return *this;
  }
  template <typename T>
  Params& SetOptional(int index, bool is_null, T value) {
    return is_null ? SetNull(index) : Set(index, value);
  }
  Datum* values() { return values_; }
  const char* nulls() const { return nulls_; }

 private:
  Datum values_[kMaxStatementArgs] = {};
  char nulls_[kMaxStatementArgs + 1] = "            ";
};

// A scoped SPI connection. On normal exit it calls SPI_finish; when it is
// unwound by an exception it leaves the SPI stack to the transaction abort
// that the boundary is about to cause (AtEOXact_SPI / AtEOSubXact_SPI).
//
// INVARIANT: while a session is open, CurrentMemoryContext is SPI's and dies
// with SPI_finish. A by-reference result must be built after the session's
// scope ends, or copied into a context of the caller (the per-query context).
class SpiSession {
 public:
  SpiSession();
  ~SpiSession();
  SpiSession(const SpiSession&) = delete;
  SpiSession& operator=(const SpiSession&) = delete;

  // Runs a statement; returns the number of rows processed. `limit` 0 = all.
  uint64 Execute(Statement& statement, Params& params, long limit = 0);

  SPITupleTable* tuples() const { return SPI_tuptable; }

  // Frees the last result. Results otherwise live until the session ends,
  // which a loop of executions (claim's wait) must not let pile up.
  void FreeResult();

  // Column `column` (1-based) of row `row` of the last result.
  Datum Value(uint64 row, int column, bool* is_null) const;
  int64 Int64(uint64 row, int column) const;
  int32 Int32(uint64 row, int column) const;
  bool Bool(uint64 row, int column) const;
  // A double precision column; 0 when NULL.
  double Float8(uint64 row, int column) const;
  // A text column, copied; "" when NULL.
  std::string Text(uint64 row, int column) const;

 private:
  int uncaught_at_entry_;
};

}  // namespace pgq::pg
