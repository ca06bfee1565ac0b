// One row into a table the way INSERT ... VALUES writes it, without a plan
// or an executor node tree: NOT NULL and CHECK constraints, the heap insert
// (TOAST included), every index (partial predicates, unique checks). What an
// INSERT statement costs beyond that is its set-up per execution (issue 16:
// a third of a single enqueue), which is what this avoids.
//
// For tables of ours only: no triggers, row-level security, partitions or
// generated columns (pgq.job_rows has none; the caller checks nothing of that,
// and no privilege: the caller's right was checked before, as for our
// statements, which run as the tables' owner).
#pragma once

#include "pg/pg.h"

namespace pgq::pg {

// Raises what an INSERT raises in a read-only transaction (or on a standby)
// or in parallel mode: for callers that do something first (draw an id).
void RequireInsertAllowed();

// `values` and `nulls` have one entry per attribute of the table, in
// attribute order. Raises what the INSERT would (read_only_sql_transaction,
// not_null_violation, check_violation, unique_violation).
void InsertRow(Oid relid, const Datum* values, const bool* nulls);

// Several rows into one table: what InsertRow sets up (the relation, its
// indexes, a slot) done once. The table is opened with ROW EXCLUSIVE.
//
// INVARIANT: scoped inside one (sub)transaction; when the scope is left by
// an exception, the abort that follows releases what it holds.
class RowInserter {
 public:
  explicit RowInserter(Oid relid);
  ~RowInserter();
  RowInserter(const RowInserter&) = delete;
  RowInserter& operator=(const RowInserter&) = delete;

  void Insert(const Datum* values, const bool* nulls);

 private:
  struct State;
  State* state_;
  int uncaught_at_entry_;
};

}  // namespace pgq::pg
