// SPI with prepared plans kept for the life of the backend.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string>
#include <utility>

#include "pg/boundary.h"

namespace pgq::pg {

// The most parameters a statement of ours takes (a ring job moved into
// pgq.job_rows: 17). BuiltStatement refuses more; a Statement aggregate
// with more does not compile.
inline constexpr int kMaxStatementArgs = 20;

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

// A statement whose text is put together at run time: from parts that
// more than one statement shares (the columns of a new job, the move into
// dead-letter), or naming a stream's own tables (built from its id). Each
// is built on first use inside a SQL function's boundary (never at library
// load) and kept, with its plan, for the backend's life. Not copyable: the
// statement points into the text.
class BuiltStatement {
 public:
  BuiltStatement(std::string sql, std::initializer_list<Oid> argtypes)
      : BuiltStatement(std::move(sql), argtypes.begin(), static_cast<int>(argtypes.size())) {}
  template <size_t N>
  BuiltStatement(std::string sql, const Oid (&argtypes)[N])
      : BuiltStatement(std::move(sql), argtypes, static_cast<int>(N)) {}
  BuiltStatement(std::string sql, const Oid* argtypes, int nargs);
  BuiltStatement(const BuiltStatement&) = delete;
  BuiltStatement& operator=(const BuiltStatement&) = delete;
  pg::Statement& get() { return statement_; }

 private:
  std::string sql_;
  pg::Statement statement_;
};

// Parameter values for one execution.
class Params {
 public:
  Params() { std::fill(nulls_, nulls_ + kMaxStatementArgs, ' '); }
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
  char nulls_[kMaxStatementArgs + 1] = {};  // ' ' (not null) but where set
};

// The rows one execution returned (and how many it processed). It holds its
// own tuple table, so a later statement never changes what it reads: read
// results in any order, keep several at once. Columns are 1-based positions
// or names (ColumnNumber resolves a name once, for a loop over rows).
//
// INVARIANT: the rows live in the session's memory until Free() or the end
// of the SpiSession that ran the statement; a Result must not be read after
// that (declare it inside the session's scope).
class Result {
 public:
  Result() = default;
  Result(SPITupleTable* tuples, uint64 processed) : tuples_(tuples), processed_(processed) {}
  // Rows made without a statement (the job rings, pg/job_ring.h), read the
  // same way: `tuples` of `desc`, in the current memory context, which the
  // caller's SPI session outlives.
  static Result Rows(TupleDesc desc, HeapTuple* tuples, uint64 count);
  // A descriptor for Rows, made once (in TopMemoryContext) by its caller:
  // the columns' names and types.
  static TupleDesc Describe(std::initializer_list<std::pair<const char*, Oid>> columns);

  // Rows returned, or processed by a statement without RETURNING.
  uint64 size() const { return processed_; }
  bool empty() const { return processed_ == 0; }
  // Columns of the rows returned (0 when none were).
  int columns() const { return tuples_ == nullptr ? 0 : tuples_->tupdesc->natts; }

  // Column `column` (1-based) of row `row`.
  Datum Value(uint64 row, int column, bool* is_null) const;
  int64 Int64(uint64 row, int column) const;       // 0 when NULL
  int32 Int32(uint64 row, int column) const;       // 0 when NULL
  bool Bool(uint64 row, int column) const;         // false when NULL
  double Float8(uint64 row, int column) const;     // 0 when NULL
  std::string Text(uint64 row, int column) const;  // copied; "" when NULL
  bool IsNull(uint64 row, int column) const;

  // The position of the column named `name`; raises when there is none.
  int ColumnNumber(const char* name) const;

  // By name, for the statements whose columns are read once or twice.
  Datum Value(uint64 row, const char* name, bool* is_null) const {
    return Value(row, ColumnNumber(name), is_null);
  }
  int64 Int64(uint64 row, const char* name) const { return Int64(row, ColumnNumber(name)); }
  int32 Int32(uint64 row, const char* name) const { return Int32(row, ColumnNumber(name)); }
  bool Bool(uint64 row, const char* name) const { return Bool(row, ColumnNumber(name)); }
  double Float8(uint64 row, const char* name) const { return Float8(row, ColumnNumber(name)); }
  std::string Text(uint64 row, const char* name) const { return Text(row, ColumnNumber(name)); }
  bool IsNull(uint64 row, const char* name) const { return IsNull(row, ColumnNumber(name)); }

  // Frees the rows now: a loop of executions (claim's wait) must not let
  // them pile up until the session ends.
  void Free();

 private:
  SPITupleTable* tuples_ = nullptr;
  uint64 processed_ = 0;
  bool owned_ = false;  // made by Rows: freed with pfree, not SPI
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

  // Runs a statement; its rows. `limit` 0 = all.
  Result Execute(Statement& statement, Params& params, long limit = 0);
  // The same, reading what committed up to now even in a REPEATABLE READ
  // transaction (as foreign-key checks do): for the check that must see a
  // change committed after the transaction's snapshot was taken.
  Result ExecuteSeeingLatest(Statement& statement, Params& params, long limit = 0);
  // A read-only statement (a SELECT) at `snapshot` as it is: its command id
  // too, so a snapshot whose curcid is 0 sees none of this transaction's
  // own changes (a count of what committed, service/backpressure.h).
  Result ExecuteAt(Statement& statement, Params& params, Snapshot snapshot);
  // Runs a utility statement of ours once, unprepared (DDL whose table
  // names are built from ids: INVARIANT of Statement, no user value).
  void ExecuteUtility(const std::string& sql);

 private:
  // `snapshot`: InvalidSnapshot for the transaction's, kLatestSnapshot for
  // one taken as the statement starts; `read_only`: run at it as given,
  // with no command counter increment.
  static inline const Snapshot kLatestSnapshot = reinterpret_cast<Snapshot>(1);
  Result Run(Statement& statement, Params& params, long limit, Snapshot snapshot, bool read_only);
  int uncaught_at_entry_;
};

}  // namespace pgq::pg
