// pgq-worker's command line: what to claim, how many at once, what to run.
// Pure C++ (no libpq): unit-tested in cli/tests.
#pragma once

#include <string>
#include <vector>

namespace pgq::cli {

struct Options {
  std::vector<std::string> queues;  // --queue, once or more: one claim takes from all of them
  std::string dsn;                  // empty: libpq's defaults (PGHOST, PGDATABASE, ...)
  int concurrency = 1;              // commands running at once
  int prefetch = 0;                 // jobs claimed ahead of a free slot
  std::string lease;                // PostgreSQL interval; empty: the queue's lease
  std::string wait = "30 seconds";  // how long one claim blocks in the server
  long max_jobs = 0;                // 0: no limit (run until a signal)
  bool verbose = false;
  // Exit statuses of the command with a meaning of their own; 0: none.
  int unknown_exit_code = 0;              // outcome unknown: left to its lease's end
  int snooze_exit_code = 0;               // not now: pgq.snooze, the attempt not spent
  std::string snooze_delay = "1 minute";  // PostgreSQL interval, unless the command wrote one
  std::string kill_grace = "10 seconds";  // a cancelled command's SIGTERM, then SIGKILL
  std::vector<std::string> command;       // argv of the command run for each job
};

enum class ParseStatus { kRun, kHelp, kUsageError };

struct ParseResult {
  ParseStatus status = ParseStatus::kUsageError;
  Options options;
  std::string error;  // for kUsageError: one line, no program name
};

inline constexpr int kMaxConcurrency = 256;
inline constexpr int kMaxPrefetch = 1000;

// A whole decimal number in [min, max], nothing else (also pgq-relay's).
bool ParseNumber(const std::string& text, long min, long max, long* out);

// args excludes the program name.
ParseResult ParseOptions(const std::vector<std::string>& args);

// The --help text.
std::string UsageText();

}  // namespace pgq::cli
