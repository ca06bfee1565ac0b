// The C/C++ boundary. Two rules keep the server alive:
//
//  1. No C++ exception ever unwinds through a PostgreSQL frame. Every SQL
//     function is defined with PGQ_FUNCTION, whose extern "C" shim runs the
//     C++ body inside try, catches everything into plain data, leaves the try
//     scope, and only then raises the PostgreSQL error.
//  2. No ereport longjmp ever skips a C++ destructor. Every PostgreSQL call
//     that can raise, made from a frame holding C++ objects, goes through
//     Guard(), which turns the error into a C++ PgError carrying the original
//     ErrorData; the boundary re-raises it with its SQLSTATE intact.
#pragma once

#include "pg/pg.h"

namespace pgq::pg {

// A PostgreSQL error caught by Guard. It only carries a pointer: the
// ErrorData lives in the memory context that was current when Guard was
// entered. INVARIANT: that context outlives the exception, which holds
// because the boundary re-raises before the function returns.
class PgError final : public std::exception {
 public:
  explicit PgError(ErrorData* data) noexcept : data_(data) {}
  ErrorData* data() const noexcept { return data_; }
  const char* what() const noexcept override;

 private:
  ErrorData* data_;
};

// An error raised by pgq_cpp itself, with PostgreSQL's message fields.
class UserError final : public std::exception {
 public:
  UserError(int sqlstate, std::string message, std::string detail, std::string hint)
      : sqlstate_(sqlstate),
        message_(std::move(message)),
        detail_(std::move(detail)),
        hint_(std::move(hint)) {}
  int sqlstate() const noexcept { return sqlstate_; }
  const std::string& message() const noexcept { return message_; }
  const std::string& detail() const noexcept { return detail_; }
  const std::string& hint() const noexcept { return hint_; }
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  int sqlstate_;
  std::string message_;
  std::string detail_;
  std::string hint_;
};

// Throws a UserError; the boundary turns it into ereport(ERROR, ...).
[[noreturn]] void Raise(int sqlstate, std::string message, std::string detail = {},
                        std::string hint = {});

// Runs `fn`, which calls PostgreSQL, and converts an ereport(ERROR) raised in
// it into a PgError.
// INVARIANT: `fn` holds no object with a destructor and never throws; it may
// be longjmp'd out of. Never return or throw inside PG_TRY.
template <typename Fn>
auto Guard(Fn&& fn) -> std::invoke_result_t<Fn&> {
  using Result = std::invoke_result_t<Fn&>;
  if constexpr (std::is_void_v<Result>) {
    MemoryContext caller_context = CurrentMemoryContext;
    // volatile: assigned after the longjmp back into this frame.
    ErrorData* volatile error = nullptr;
    // Called through a noexcept frame: an exception thrown by `fn` would
    // leave PG_TRY's jump buffer installed for a frame that is gone; this
    // way it ends the process (std::terminate) instead of corrupting it.
    const auto call = [&fn]() noexcept { fn(); };
    PG_TRY();
    { call(); }
    PG_CATCH();
    {
      MemoryContextSwitchTo(caller_context);
      error = CopyErrorData();
      FlushErrorState();
    }
    PG_END_TRY();
    if (error != nullptr) throw PgError(error);
  } else {
    // The result lives outside the frame that calls sigsetjmp.
    Result result{};
    Guard([&] { result = fn(); });
    return result;
  }
}

using FunctionBody = Datum (*)(FunctionCallInfo);

// Runs a SQL function's C++ body; never lets an exception out. Defined in
// boundary.cpp; only PGQ_FUNCTION calls it.
Datum CallBoundary(FunctionCallInfo fcinfo, FunctionBody body);

// The same barrier for C++ called from a C frame that is not a SQL function
// (a background worker's loop): runs body(arg), and turns every exception
// into ereport(ERROR) after leaving the try scope.
using ProtectedBody = Datum (*)(void* arg);
Datum RunProtected(ProtectedBody body, void* arg);

// RunProtected for a callable: AtBoundary([&] { ... }).
template <typename Fn>
void AtBoundary(Fn&& fn) {
  using Callable = std::remove_reference_t<Fn>;
  RunProtected(
      [](void* arg) -> Datum {
        (*static_cast<Callable*>(arg))();
        return static_cast<Datum>(0);
      },
      const_cast<void*>(static_cast<const void*>(&fn)));
}

}  // namespace pgq::pg

// Defines an SQL-callable function `name` whose body is C++:
//
//   PGQ_FUNCTION(pgq_pause) { ... return BoolGetDatum(paused); }
#define PGQ_FUNCTION(name)                                                              \
  static Datum name##_body(FunctionCallInfo fcinfo);                                    \
  extern "C" {                                                                          \
  PG_FUNCTION_INFO_V1(name);                                                            \
  Datum name(PG_FUNCTION_ARGS) { return ::pgq::pg::CallBoundary(fcinfo, name##_body); } \
  }                                                                                     \
  static Datum name##_body(FunctionCallInfo fcinfo)
