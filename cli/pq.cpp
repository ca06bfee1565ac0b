#include "pq.h"

#include <cstdlib>
#include <cstring>
#include <memory>

namespace pgq::cli {

namespace {

std::string Field(const PGresult* result, int code) {
  const char* value = PQresultErrorField(result, code);
  return value == nullptr ? std::string() : std::string(value);
}

// libpq's messages end with a newline.
std::string Trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

std::vector<const char*> Values(std::initializer_list<const char*> params) {
  return std::vector<const char*>(params.begin(), params.end());
}

}  // namespace

std::string DbError::Describe() const {
  std::string text = what();
  if (!sqlstate_.empty()) text += " (SQLSTATE " + sqlstate_ + ")";
  if (!detail_.empty()) text += "\nDETAIL: " + detail_;
  if (!hint_.empty()) text += "\nHINT: " + hint_;
  return text;
}

Connection Connection::Open(const std::string& conninfo, const char* application_name) {
  return Open(conninfo, application_name, std::string());
}

Connection Connection::Open(const std::string& conninfo, const char* application_name,
                            const std::string& settings) {
  // dbname with expand_dbname = 1 takes a whole connection string or URI.
  // pgq.claim returns payloads as JSON text, which is UTF-8 whatever the
  // locale; the application name shows the worker in pg_stat_activity.
  // "options" after dbname: a later keyword wins over the expanded string's,
  // so it carries the string's own options (or PGOPTIONS) and `settings`.
  std::string options;
  if (!settings.empty()) {
    char* error = nullptr;
    std::unique_ptr<PQconninfoOption, void (*)(PQconninfoOption*)> parsed(
        PQconninfoParse(conninfo.c_str(), &error), PQconninfoFree);
    if (!parsed) {
      const std::string why = error != nullptr ? Trimmed(error) : "out of memory";
      PQfreemem(error);
      throw DbError("", why);
    }
    for (const PQconninfoOption* option = parsed.get(); option->keyword != nullptr; ++option) {
      if (std::strcmp(option->keyword, "options") == 0 && option->val != nullptr) {
        options = option->val;
      }
    }
    if (options.empty() && std::getenv("PGOPTIONS") != nullptr) options = std::getenv("PGOPTIONS");
    if (!options.empty()) options += ' ';
    options += settings;
  }
  const char* keywords[] = {"dbname", "fallback_application_name", "client_encoding",
                            settings.empty() ? nullptr : "options", nullptr};
  const char* values[] = {conninfo.empty() ? nullptr : conninfo.c_str(), application_name, "UTF8",
                          settings.empty() ? nullptr : options.c_str(), nullptr};
  Connection connection(PQconnectdbParams(keywords, values, 1));
  if (!connection.conn_) throw DbError("", "out of memory allocating a connection");
  if (PQstatus(connection.conn_.get()) != CONNECTION_OK) {
    throw DbError("", Trimmed(PQerrorMessage(connection.conn_.get())));
  }
  return connection;
}

DbError Connection::ErrorOf(const PGresult* result) const {
  if (result == nullptr || Field(result, PG_DIAG_MESSAGE_PRIMARY).empty()) {
    return DbError("", Trimmed(PQerrorMessage(conn_.get())));
  }
  return DbError(Field(result, PG_DIAG_SQLSTATE), Field(result, PG_DIAG_MESSAGE_PRIMARY),
                 Field(result, PG_DIAG_MESSAGE_DETAIL), Field(result, PG_DIAG_MESSAGE_HINT),
                 Field(result, PG_DIAG_SEVERITY_NONLOCALIZED));
}

Result Connection::Run(const char* sql, std::initializer_list<const char*> params) {
  const std::vector<const char*> values = Values(params);
  return Result(PQexecParams(conn_.get(), sql, static_cast<int>(values.size()), nullptr,
                             values.data(), nullptr, nullptr, 0));
}

Result Connection::Exec(const char* sql, std::initializer_list<const char*> params) {
  Result result = Run(sql, params);
  if (PQresultStatus(result.get()) != PGRES_TUPLES_OK && PQstatus(conn_.get()) == CONNECTION_BAD) {
    PQreset(conn_.get());
    ++reconnects_;
    // Not reconnected: the reason ("not accepting connections", "refused").
    if (PQstatus(conn_.get()) != CONNECTION_OK) throw ErrorOf(nullptr);
    result = Run(sql, params);
  }
  if (PQresultStatus(result.get()) != PGRES_TUPLES_OK) throw ErrorOf(result.get());
  return result;
}

void Connection::Send(const char* sql, std::initializer_list<const char*> params) {
  Send(sql, Values(params));
}

void Connection::Send(const char* sql, const std::vector<const char*>& params) {
  if (PQsendQueryParams(conn_.get(), sql, static_cast<int>(params.size()), nullptr, params.data(),
                        nullptr, nullptr, 0) == 0) {
    throw ErrorOf(nullptr);
  }
}

Result Connection::Consume() {
  if (PQconsumeInput(conn_.get()) == 0) throw ErrorOf(nullptr);
  while (PQisBusy(conn_.get()) == 0) {
    Result next(PQgetResult(conn_.get()));
    if (!next) {  // the statement is over
      Result result = std::move(pending_);
      if (!result) throw ErrorOf(nullptr);
      if (PQresultStatus(result.get()) != PGRES_TUPLES_OK) throw ErrorOf(result.get());
      return result;
    }
    // One statement has one result; an error after rows replaces them.
    if (!pending_ || PQresultStatus(next.get()) != PGRES_TUPLES_OK) pending_ = std::move(next);
  }
  return nullptr;
}

bool Connection::Reset() {
  pending_.reset();
  PQreset(conn_.get());
  ++reconnects_;
  return ok();
}

void Connection::Cancel() {
  std::unique_ptr<PGcancel, void (*)(PGcancel*)> cancel(PQgetCancel(conn_.get()), PQfreeCancel);
  char message[256];
  // Best effort: if the request fails, the claim ends when its wait does.
  if (cancel) (void)PQcancel(cancel.get(), message, sizeof message);
}

std::optional<double> IntervalSeconds(Connection& connection, const std::string& text,
                                      std::string* error) {
  try {
    const Result result =
        connection.Exec("SELECT pg_catalog.date_part('epoch', $1::interval)", {text.c_str()});
    return std::strtod(PQgetvalue(result.get(), 0, 0), nullptr);
  } catch (const DbError& e) {
    // Class 22: bad input; anything else is not the user's typo.
    if (e.sqlstate().rfind("22", 0) != 0) throw;
    *error = e.what();
    return std::nullopt;
  }
}

}  // namespace pgq::cli
