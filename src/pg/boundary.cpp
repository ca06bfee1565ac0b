#include "pg/boundary.h"

#include <cstdio>

#include "pg/catalog_version.h"

namespace pgq::pg {

const char* PgError::what() const noexcept {
  return data_ != nullptr && data_->message != nullptr ? data_->message : "PostgreSQL error";
}

void Raise(int sqlstate, std::string message, std::string detail, std::string hint) {
  throw UserError(sqlstate, std::move(message), std::move(detail), std::move(hint));
}

namespace {

// Message text is copied into fixed buffers inside the catch blocks: nothing
// there may allocate with palloc (which could longjmp out of a catch handler).
constexpr std::size_t kMessageMax = 1024;

void CopyText(char (&target)[kMessageMax], const std::string& source) {
  std::snprintf(target, kMessageMax, "%s", source.c_str());
}

}  // namespace

Datum CallBoundary(FunctionCallInfo fcinfo, FunctionBody body) {
  struct Call {
    FunctionCallInfo fcinfo;
    FunctionBody body;
  } call{fcinfo, body};
  return RunProtected(
      [](void* arg) -> Datum {
        Call* c = static_cast<Call*>(arg);
        // The one door for catalog versions (ADR 0024): a kept answer after
        // the first call, until an invalidation.
        RequireCurrentCatalog();
        return c->body(c->fcinfo);
      },
      &call);
}

Datum RunProtected(ProtectedBody body, void* arg) {
  enum class Failure { kNone, kPostgres, kUser, kOutOfMemory, kInternal };
  Failure failure = Failure::kNone;
  ErrorData* pg_error = nullptr;
  int sqlstate = 0;
  char message[kMessageMax] = "";
  char detail[kMessageMax] = "";
  char hint[kMessageMax] = "";

  try {
    return body(arg);
  } catch (const PgError& e) {
    failure = Failure::kPostgres;
    pg_error = e.data();
  } catch (const UserError& e) {
    failure = Failure::kUser;
    sqlstate = e.sqlstate();
    CopyText(message, e.message());
    CopyText(detail, e.detail());
    CopyText(hint, e.hint());
  } catch (const std::bad_alloc&) {
    failure = Failure::kOutOfMemory;
  } catch (const std::exception& e) {
    failure = Failure::kInternal;
    std::snprintf(message, kMessageMax, "%s", e.what());
  } catch (...) {
    failure = Failure::kInternal;
    std::snprintf(message, kMessageMax, "unknown C++ exception");
  }

  // Outside every try scope now: only plain data lives in this frame, so the
  // longjmp of ereport skips nothing.
  switch (failure) {
    case Failure::kPostgres:
      ReThrowError(pg_error);
      break;
    case Failure::kUser:
      ereport(ERROR, (errcode(sqlstate), errmsg_internal("%s", message),
                      detail[0] != '\0' ? errdetail_internal("%s", detail) : 0,
                      hint[0] != '\0' ? errhint("%s", hint) : 0));
      break;
    case Failure::kOutOfMemory:
      ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory"),
                      errdetail("pgq_cpp could not allocate memory.")));
      break;
    case Failure::kInternal:
    case Failure::kNone:
      ereport(ERROR,
              (errcode(ERRCODE_INTERNAL_ERROR), errmsg("pgq_cpp internal error: %s", message)));
      break;
  }
  pg_unreachable();
}

}  // namespace pgq::pg
