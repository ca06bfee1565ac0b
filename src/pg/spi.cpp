#include "pg/spi.h"

namespace pgq::pg {

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

uint64 SpiSession::Execute(Statement& statement, Params& params, long limit) {
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
  const int rc = Guard([&] {
    return SPI_execute_plan(statement.plan, params.values(), params.nulls(), false, limit);
  });
  if (rc < 0) {
    Raise(ERRCODE_INTERNAL_ERROR,
          "SPI_execute_plan failed: " + std::string(SPI_result_code_string(rc)), statement.sql);
  }
  return SPI_processed;
}

void SpiSession::FreeResult() {
  SPITupleTable* result = SPI_tuptable;
  if (result == nullptr) return;
  Guard([result] { SPI_freetuptable(result); });
}

Datum SpiSession::Value(uint64 row, int column, bool* is_null) const {
  // SPI_getbinval reads the tuple in place; it does not allocate or raise.
  return SPI_getbinval(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, column, is_null);
}

bool SpiSession::IsNull(uint64 row, int column) const {
  bool is_null = false;
  Value(row, column, &is_null);
  return is_null;
}

int64 SpiSession::Int64(uint64 row, int column) const {
  bool is_null = false;
  const Datum value = Value(row, column, &is_null);
  return is_null ? 0 : DatumGetInt64(value);
}

int32 SpiSession::Int32(uint64 row, int column) const {
  bool is_null = false;
  const Datum value = Value(row, column, &is_null);
  return is_null ? 0 : DatumGetInt32(value);
}

bool SpiSession::Bool(uint64 row, int column) const {
  bool is_null = false;
  const Datum value = Value(row, column, &is_null);
  return !is_null && DatumGetBool(value);
}

}  // namespace pgq::pg
