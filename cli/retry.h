// Retrying a job's outcome (pgq.complete, pgq.fail, pgq.release) after the
// connection to the server was lost: which errors are worth it, and how long
// to wait before each try. Pure functions, as the Node client's #settle and
// isConnectionError (clients/node/lib/worker.js).
#pragma once

#include <algorithm>
#include <chrono>
#include <string>

namespace pgq::cli {

// Whether an error means the server could not take the statement (the
// session ended, or no new one could begin), rather than an error it raised
// for the statement: the statement did not run, or its outcome is unknown,
// and the same statement may work on a new connection. That is
//   - no SQLSTATE at all (the connection broke, or could not be opened:
//     refused, reset, no such socket),
//   - class 08 (connection exception),
//   - 57P01 admin_shutdown (terminated, or the server is stopping),
//     57P02 crash_shutdown, 57P03 cannot_connect_now (starting or stopping),
//   - 53300 too_many_connections,
//   - 55000 at FATAL severity (a database not accepting connections, seen
//     while connecting).
inline bool IsConnectionError(const std::string& sqlstate, const std::string& severity) {
  if (sqlstate.empty() || sqlstate.compare(0, 2, "08") == 0) return true;
  if (sqlstate == "57P01" || sqlstate == "57P02" || sqlstate == "57P03" || sqlstate == "53300") {
    return true;
  }
  return sqlstate == "55000" && severity == "FATAL";
}

// The backoff between tries: from 0.1 s, doubled after each, up to 2 s.
constexpr std::chrono::milliseconds kFirstRetry{100};
constexpr std::chrono::milliseconds kMaxRetry{2000};

inline std::chrono::milliseconds NextBackoff(std::chrono::milliseconds backoff) {
  return std::min(2 * backoff, kMaxRetry);
}

// The pause before a try with this backoff: between half of it and all of it,
// `unit` (in [0, 1), random) saying where, so workers that lost the same
// server do not all come back at the same instant.
inline std::chrono::milliseconds Jittered(std::chrono::milliseconds backoff, double unit) {
  unit = std::clamp(unit, 0.0, 1.0);
  return std::chrono::milliseconds(
      static_cast<long long>(static_cast<double>(backoff.count()) * (0.5 + unit / 2)));
}

}  // namespace pgq::cli
