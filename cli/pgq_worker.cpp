// pgq-worker: runs a command for each job of a pgq_cpp queue (issue 8), or of
// several (--queue given once per queue; issue 18).
//
//   pgq-worker --queue NAME [--queue NAME...] [--dsn CONNINFO] [--concurrency N]
//              [--prefetch N] [--lease INTERVAL] [--wait INTERVAL] [--once | --max-jobs N]
//              [--unknown-exit-code N] [--snooze-exit-code N]
//              [--snooze-delay INTERVAL] [--kill-grace INTERVAL]
//              -- command [args...]
//
// Exit status: 0 normal end (also after SIGTERM/SIGINT), 1 connection, server
// or other error, 2 usage error. cli/README.md has the whole contract.
#include <libpq-fe.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "options.h"
#include "pq.h"
#include "program.h"
#include "process.h"
#include "worker.h"

namespace pgq::cli {

namespace {

// A year: a longer grace is as good as none, and stays far from overflowing
// the clock's duration.
constexpr double kMaxKillGraceSeconds = 365.0 * 24 * 3600;

constexpr const char* kProgram = "pgq-worker";

int UsageError(const std::string& message) { return pgq::cli::UsageError(kProgram, message); }

int Main(const std::vector<std::string>& args) {
  const ParseResult parsed = ParseOptions(args);
  if (parsed.status == ParseStatus::kHelp) {
    std::fputs(UsageText().c_str(), stdout);
    return kExitOk;
  }
  if (parsed.status == ParseStatus::kUsageError) return UsageError(parsed.error);
  const Options& options = parsed.options;
  if (!IsRunnable(options.command.front())) {
    return UsageError("cannot run " + options.command.front() +
                      ": not an executable file (nor one in PATH)");
  }

  // Before connecting: a stop signal that comes while connecting is kept in
  // the pipe, and the loop then ends before its first claim.
  SignalPipe signals = SignalPipe::Install();
  Connection control = Connection::Open(options.dsn);
  LeaseSetting lease;
  std::string error;
  if (!options.lease.empty()) {
    const std::optional<double> seconds = IntervalSeconds(control, options.lease, &error);
    if (!seconds) return UsageError("--lease: " + error);
    if (*seconds <= 0) return UsageError("--lease must be more than 0");
    lease = LeaseSetting{options.lease, *seconds};
  }
  const std::optional<double> wait = IntervalSeconds(control, options.wait, &error);
  if (!wait) return UsageError("--wait: " + error);
  if (*wait < 0) return UsageError("--wait must not be negative");
  if (*wait == 0 && options.max_jobs == 0) {
    return UsageError("--wait must be more than 0 without --once or --max-jobs");
  }
  // Checked now, not when the first job is snoozed or cancelled.
  const std::optional<double> snooze_delay = IntervalSeconds(control, options.snooze_delay, &error);
  if (!snooze_delay) return UsageError("--snooze-delay: " + error);
  if (*snooze_delay < 0) return UsageError("--snooze-delay must not be negative");
  const std::optional<double> kill_grace = IntervalSeconds(control, options.kill_grace, &error);
  if (!kill_grace) return UsageError("--kill-grace: " + error);
  if (*kill_grace < 0) return UsageError("--kill-grace must not be negative");
  Connection claims = Connection::Open(options.dsn);
  Worker worker(options, lease,
                std::chrono::duration_cast<Clock::duration>(
                    std::chrono::duration<double>(std::min(*kill_grace, kMaxKillGraceSeconds))),
                std::move(claims), std::move(control), signals);
  return worker.Run();
}

}  // namespace

}  // namespace pgq::cli

int main(int argc, char** argv) {
  return pgq::cli::RunProgram(pgq::cli::kProgram, argc, argv, pgq::cli::Main);
}
