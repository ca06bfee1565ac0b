#include "pg/spi.h"

#include <algorithm>
#include <optional>

#include "pg/invalidation.h"
#include "pg/run_as.h"

extern "C" {
#include "catalog/namespace.h"
#include "catalog/pg_namespace.h"
#include "access/tupdesc.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/inval.h"
#include "utils/plancache.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
}

namespace pgq::pg {

namespace {

bool NeedsPlanning(SPIPlanPtr plan) {
  ListCell* cell;
  foreach (cell, SPI_plan_get_plan_sources(plan)) {
    const CachedPlanSource* source = static_cast<CachedPlanSource*>(lfirst(cell));
    if (!source->is_valid || source->gplan == nullptr || !source->gplan->is_valid) return true;
  }
  return false;
}

// Builds the statement's generic plan now, if it is missing or stale, with
// sequential scans disabled. Our statements touch few rows, found by id or
// along an index with LIMIT n, so the index path is right at any table size;
// but a generic plan is kept until the next invalidation, and one built while
// the table held a few rows would scan it sequentially with an `id = ANY(...)`
// filter: quadratic in the batch once the table has grown.
//
// JIT is off for the same plans: a path that can only be a sequential scan
// (a small catalog-like table such as pgq.queues) gets the disabled cost of
// 1e10, far above jit_above_cost, and would be compiled on every execution
// (measured: 100-750 ms of LLVM per maintenance pass). Our statements are
// short; JIT never pays for them.
void PlanWithIndexes(SPIPlanPtr plan) {
  Guard([plan] {
    AcceptInvalidationMessages();  // a stale plan is rebuilt here, not later
    if (!NeedsPlanning(plan)) return;
    const int nest_level = NewGUCNestLevel();
    (void)set_config_option("enable_seqscan", "off", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE,
                            true, 0, false);
    (void)set_config_option("jit", "off", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0,
                            false);
    CachedPlan* built = SPI_plan_get_cached_plan(plan);
    if (built != nullptr) ReleaseCachedPlan(built, CurrentResourceOwner);
    AtEOXact_GUC(true, nest_level);
  });
}

// Our statements are planned and run with pg_catalog as the whole search
// path, whatever the session's (INVARIANT of Statement: every object of ours
// is qualified with pgq.): an operator or function planted in a schema that
// comes first on a caller's search_path is never resolved, so never called.
// A cached plan keeps the path it was prepared with and is re-planned each
// time the current one differs, so the path is pushed for the execution too.
OverrideSearchPath* CatalogOnlyPath() {
  static OverrideSearchPath* path = nullptr;
  if (path == nullptr) {
    path = static_cast<OverrideSearchPath*>(
        MemoryContextAllocZero(TopMemoryContext, sizeof(OverrideSearchPath)));
    path->addCatalog = true;
  }
  return path;
}

}  // namespace

Oid TablesOwner() {
  // The owner of schema pgq: re-read after its row changed (ALTER SCHEMA,
  // DROP and CREATE EXTENSION).
  static Oid owner = InvalidOid;
  static CacheEpoch known{invalidation::kSchema};
  if (known.Valid()) return owner;
  const uint64 begun = known.Begin();
  owner = Guard([] {
    const Oid schema = get_namespace_oid("pgq", true);
    if (!OidIsValid(schema)) return InvalidOid;
    HeapTuple tuple = SearchSysCache1(NAMESPACEOID, ObjectIdGetDatum(schema));
    if (!HeapTupleIsValid(tuple)) return InvalidOid;
    const Oid nspowner = reinterpret_cast<Form_pg_namespace>(GETSTRUCT(tuple))->nspowner;
    ReleaseSysCache(tuple);
    return nspowner;
  });
  known.Mark(begun);
  return owner;
}

SpiSession::SpiSession() : uncaught_at_entry_(std::uncaught_exceptions()) {
  const int rc = Guard([] { return SPI_connect(); });
  if (rc != SPI_OK_CONNECT) {
    Raise(ERRCODE_INTERNAL_ERROR, "SPI_connect failed: " + std::string(SPI_result_code_string(rc)));
  }
}

SpiSession::~SpiSession() {
  if (std::uncaught_exceptions() > uncaught_at_entry_) return;  // abort cleans up
  SPI_finish();
}

Result SpiSession::Execute(Statement& statement, Params& params, long limit) {
  return Run(statement, params, limit, InvalidSnapshot, false);
}

Result SpiSession::ExecuteSeeingLatest(Statement& statement, Params& params, long limit) {
  return Run(statement, params, limit, kLatestSnapshot, false);
}

Result SpiSession::ExecuteAt(Statement& statement, Params& params, Snapshot snapshot) {
  return Run(statement, params, 0, snapshot, true);
}

Result SpiSession::Run(Statement& statement, Params& params, long limit, Snapshot snapshot,
                       bool read_only) {
  // Every statement of ours runs as the owner of pgq's tables, whoever
  // calls: the caller's rights were checked before (service/rights.h, ADR 0010),
  // and the statement's text holds no value of the caller's (INVARIANT of
  // Statement), so what it can do is what we wrote.
  const Oid owner = TablesOwner();
  std::optional<RunAs> as_owner;
  if (OidIsValid(owner)) as_owner.emplace(owner);
  // Popped below; an error in between ends the transaction, whose abort
  // drops the pushed path (AtEOXact_Namespace).
  Guard([] { PushOverrideSearchPath(CatalogOnlyPath()); });
  if (statement.plan == nullptr) {
    SPIPlanPtr plan = Guard([&statement] {
      // Always the generic plan: planning once per backend is the point, and
      // our statements are written so that their generic plans are the good
      // ones (a custom plan per call would cost more than the statement).
      SPIPlanPtr prepared = SPI_prepare_cursor(statement.sql, statement.nargs, statement.argtypes,
                                               CURSOR_OPT_GENERIC_PLAN);
      if (prepared != nullptr) SPI_keepplan(prepared);
      return prepared;
    });
    if (plan == nullptr) {
      Raise(ERRCODE_INTERNAL_ERROR,
            "could not prepare statement: " + std::string(SPI_result_code_string(SPI_result)),
            statement.sql);
    }
    statement.plan = plan;
  }
  PlanWithIndexes(statement.plan);
  const int rc = Guard([&] {
    if (snapshot == kLatestSnapshot) snapshot = GetLatestSnapshot();
    if (snapshot != InvalidSnapshot) {
      return SPI_execute_snapshot(statement.plan, params.values(), params.nulls(), snapshot,
                                  InvalidSnapshot, read_only, false, limit);
    }
    return SPI_execute_plan(statement.plan, params.values(), params.nulls(), false, limit);
  });
  if (rc < 0) {
    Raise(ERRCODE_INTERNAL_ERROR,
          "SPI_execute_plan failed: " + std::string(SPI_result_code_string(rc)), statement.sql);
  }
  Guard([] { PopOverrideSearchPath(); });
  return Result(SPI_tuptable, SPI_processed);
}

BuiltStatement::BuiltStatement(std::string sql, const Oid* argtypes, int nargs)
    : sql_(std::move(sql)), statement_{nullptr, nargs, {}, nullptr} {
  // Built inside a function's boundary (spi.h), where this raises.
  if (nargs > kMaxStatementArgs) {
    Raise(ERRCODE_INTERNAL_ERROR, "a statement takes " + std::to_string(nargs) +
                                      " parameters, more than kMaxStatementArgs");
  }
  statement_.sql = sql_.c_str();
  std::copy(argtypes, argtypes + nargs, statement_.argtypes);
}

void SpiSession::ExecuteUtility(const std::string& sql) {
  const Oid owner = TablesOwner();
  std::optional<RunAs> as_owner;
  if (OidIsValid(owner)) as_owner.emplace(owner);
  Guard([] { PushOverrideSearchPath(CatalogOnlyPath()); });
  const char* text = sql.c_str();
  const int rc = Guard([text] { return SPI_execute(text, false, 0); });
  if (rc < 0) {
    Raise(ERRCODE_INTERNAL_ERROR, "SPI_execute failed: " + std::string(SPI_result_code_string(rc)),
          sql);
  }
  Guard([] { PopOverrideSearchPath(); });
}

void Result::Free() {
  SPITupleTable* tuples = tuples_;
  tuples_ = nullptr;
  processed_ = 0;
  if (tuples == nullptr) return;
  if (owned_) {
    Guard([tuples] {
      for (uint64 i = 0; i < tuples->numvals; ++i) heap_freetuple(tuples->vals[i]);
      pfree(tuples->vals);
      pfree(tuples);
    });
    return;
  }
  Guard([tuples] { SPI_freetuptable(tuples); });
}

TupleDesc Result::Describe(std::initializer_list<std::pair<const char*, Oid>> columns) {
  return Guard([&] {
    MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
    TupleDesc made = CreateTemplateTupleDesc(static_cast<int>(columns.size()));
    AttrNumber number = 0;
    for (const auto& [name, type] : columns) TupleDescInitEntry(made, ++number, name, type, -1, 0);
    MemoryContextSwitchTo(old);
    return made;
  });
}

Result Result::Rows(TupleDesc desc, HeapTuple* tuples, uint64 count) {
  Result rows;
  if (count == 0) return rows;
  SPITupleTable* table = Guard([&] {
    SPITupleTable* made = static_cast<SPITupleTable*>(palloc0(sizeof(SPITupleTable)));
    made->tupdesc = desc;
    made->vals = tuples;
    made->numvals = count;
    made->alloced = count;
    return made;
  });
  rows.tuples_ = table;
  rows.processed_ = count;
  rows.owned_ = true;
  return rows;
}

Datum Result::Value(uint64 row, int column, bool* is_null) const {
  if (tuples_ == nullptr || row >= processed_) {
    Raise(ERRCODE_INTERNAL_ERROR, "row " + std::to_string(row) + " of a result of " +
                                      std::to_string(processed_) + " rows read");
  }
  // SPI_getbinval reads the tuple in place; it does not allocate or raise.
  return SPI_getbinval(tuples_->vals[row], tuples_->tupdesc, column, is_null);
}

bool Result::IsNull(uint64 row, int column) const {
  bool is_null = false;
  (void)Value(row, column, &is_null);
  return is_null;
}

int Result::ColumnNumber(const char* name) const {
  const int number = tuples_ == nullptr
                         ? SPI_ERROR_NOATTRIBUTE
                         : Guard([&] { return SPI_fnumber(tuples_->tupdesc, name); });
  if (number <= 0) {
    Raise(ERRCODE_INTERNAL_ERROR, "a result has no column \"" + std::string(name) + "\"");
  }
  return number;
}

int64 Result::Int64(uint64 row, int column) const {
  bool is_null = false;
  const Datum value = Value(row, column, &is_null);
  return is_null ? 0 : DatumGetInt64(value);
}

int32 Result::Int32(uint64 row, int column) const {
  bool is_null = false;
  const Datum value = Value(row, column, &is_null);
  return is_null ? 0 : DatumGetInt32(value);
}

bool Result::Bool(uint64 row, int column) const {
  bool is_null = false;
  const Datum value = Value(row, column, &is_null);
  return !is_null && DatumGetBool(value);
}

double Result::Float8(uint64 row, int column) const {
  bool is_null = false;
  const Datum value = Value(row, column, &is_null);
  return is_null ? 0.0 : DatumGetFloat8(value);
}

std::string Result::Text(uint64 row, int column) const {
  bool is_null = false;
  const Datum value = Value(row, column, &is_null);
  if (is_null) return std::string();
  // Detoasting may allocate, so it is guarded.
  text* t = Guard([&] { return DatumGetTextPP(value); });
  return std::string(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
}

}  // namespace pgq::pg
