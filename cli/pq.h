// The libpq boundary of pgq-worker: owned connections and results, statements
// always with parameters, server errors kept with their SQLSTATE.
#pragma once

#include <libpq-fe.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace pgq::cli {

struct ResultDeleter {
  void operator()(PGresult* result) const { PQclear(result); }
};
using Result = std::unique_ptr<PGresult, ResultDeleter>;

// A failed connection or statement. sqlstate is empty when the server did not
// send one (the connection broke, or never opened); severity is the server's
// (ERROR, FATAL, ...), not translated, or empty.
class DbError : public std::runtime_error {
 public:
  DbError(std::string sqlstate, const std::string& message, std::string detail = {},
          std::string hint = {}, std::string severity = {})
      : std::runtime_error(message),
        sqlstate_(std::move(sqlstate)),
        detail_(std::move(detail)),
        hint_(std::move(hint)),
        severity_(std::move(severity)) {}

  const std::string& sqlstate() const { return sqlstate_; }
  const std::string& severity() const { return severity_; }
  const std::string& detail() const { return detail_; }
  const std::string& hint() const { return hint_; }
  // "message (SQLSTATE 42704)", then "DETAIL: ..." and "HINT: ..." lines.
  std::string Describe() const;

 private:
  std::string sqlstate_;
  std::string detail_;
  std::string hint_;
  std::string severity_;
};

class Connection {
 public:
  // conninfo: a libpq connection string or URI; empty for libpq's defaults
  // (the PG* environment variables). Throws DbError.
  // application_name: how pg_stat_activity shows it, unless conninfo says.
  static Connection Open(const std::string& conninfo, const char* application_name = "pgq-worker");
  // The same, with `settings` (e.g. "-c synchronous_commit=off") added to the
  // server options the conninfo (or PGOPTIONS) gives: set in the startup
  // packet, they hold for every session, the ones libpq opens again after a
  // lost connection too.
  static Connection Open(const std::string& conninfo, const char* application_name,
                         const std::string& settings);

  // Whether the connection is up (as far as libpq knows); Reset() opens it
  // again with the same parameters, and says whether that worked.
  bool ok() const { return PQstatus(conn_.get()) == CONNECTION_OK; }
  bool Reset();
  // How many times the connection was opened again (Reset, or Exec's own
  // reconnect): what a session-level lock or setting must be taken again
  // after.
  std::uint64_t reconnects() const { return reconnects_; }

  // Runs one statement (its own transaction) with text parameters, nullptr
  // for NULL; returns its rows. Throws DbError. A connection found broken is
  // reset and the statement sent once more: pgq's finishing calls are fenced
  // by (id, attempt), so a repeat changes nothing. (The worker retries them
  // further after a connection error: see retry.h.)
  Result Exec(const char* sql, std::initializer_list<const char*> params);

  // The same without waiting: the result is read with Consume().
  void Send(const char* sql, std::initializer_list<const char*> params);
  void Send(const char* sql, const std::vector<const char*>& params);
  // After the socket was readable: the statement's result once it is all
  // there (then the connection is idle again), else nullptr. Throws DbError
  // for a server error or a broken connection.
  Result Consume();
  // Asks the server to cancel the statement sent; its result still comes.
  void Cancel();

  int socket() const { return PQsocket(conn_.get()); }

 private:
  struct ConnDeleter {
    void operator()(PGconn* conn) const { PQfinish(conn); }
  };
  explicit Connection(PGconn* conn) : conn_(conn) {}
  Result Run(const char* sql, std::initializer_list<const char*> params);
  DbError ErrorOf(const PGresult* result) const;

  std::unique_ptr<PGconn, ConnDeleter> conn_;
  Result pending_;  // Consume(): the statement's result, kept until its end
  std::uint64_t reconnects_ = 0;
};

// The seconds of an interval, as the server reads it (the same parser as
// pgq.claim's); nullopt with *error set when the text is not an interval
// (class 22). Throws DbError for any other error.
std::optional<double> IntervalSeconds(Connection& connection, const std::string& text,
                                      std::string* error);

}  // namespace pgq::cli
