#include "options.h"

#include <algorithm>
#include <charconv>

namespace pgq::cli {

bool ParseNumber(const std::string& text, long min, long max, long* out) {
  long value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end || value < min || value > max) return false;
  *out = value;
  return true;
}

namespace {

ParseResult Error(std::string message) {
  ParseResult result;
  result.status = ParseStatus::kUsageError;
  result.error = std::move(message);
  return result;
}

}  // namespace

std::string UsageText() {
  return "Usage: pgq-worker --queue NAME [--queue NAME...] [options] -- command [args...]\n"
         "\n"
         "Claims jobs of a pgq_cpp queue (or of several) and runs command for each one,\n"
         "with the job's JSON payload on its stdin and PGQ_JOB_ID, PGQ_JOB_ATTEMPT,\n"
         "PGQ_JOB_MAX_ATTEMPTS and PGQ_QUEUE (the job's own queue) in its environment,\n"
         "and the job's trace context as TRACEPARENT and TRACESTATE (taken out of the\n"
         "worker's own environment for a job that has none).\n"
         "Exit 0 completes the job; anything else fails it with the command's stderr\n"
         "(last 4 kB) and its exit status. JSON the command writes to $PGQ_RESULT_FILE\n"
         "is the job's result; JSON it writes to $PGQ_PROGRESS_FILE is sent as its\n"
         "progress at each heartbeat.\n"
         "\n"
         "Options:\n"
         "  --queue NAME        the queue to consume (required); give it again for more\n"
         "                      queues: one claim takes jobs from all of them, by\n"
         "                      priority (consume is needed on every one)\n"
         "  --dsn CONNINFO      libpq connection string or URI (default: PG* variables)\n"
         "  --concurrency N     commands run at once (default 1, at most 256)\n"
         "  --prefetch N        jobs claimed ahead of a free slot (default 0)\n"
         "  --lease INTERVAL    lease of each claim (default: the queue's)\n"
         "  --wait INTERVAL     how long one claim waits in the server for a job\n"
         "                      (default '30 seconds')\n"
         "  --once              process one job, then exit\n"
         "  --max-jobs N        process N jobs, then exit\n"
         "                      (with --once or --max-jobs, also exit when a claim\n"
         "                      finds nothing within --wait)\n"
         "  --unknown-exit-code N\n"
         "                      the command's exit status N (1-255) means outcome unknown:\n"
         "                      the job is neither completed nor failed nor released,\n"
         "                      and runs again once its lease has run out\n"
         "  --snooze-exit-code N\n"
         "                      exit status N (1-255) snoozes the job (pgq.snooze, the\n"
         "                      attempt not spent) for the interval the command wrote to\n"
         "                      $PGQ_SNOOZE_FILE, else for --snooze-delay\n"
         "  --snooze-delay INTERVAL\n"
         "                      (default '1 minute')\n"
         "  --kill-grace INTERVAL\n"
         "                      a cancelled job's command gets SIGTERM, then SIGKILL\n"
         "                      this long after (default '10 seconds')\n"
         "  -v, --verbose       log every job to stderr\n"
         "  -h, --help          this text\n"
         "\n"
         "SIGTERM or SIGINT: stop claiming, give back claimed jobs not started, let the\n"
         "running commands finish, exit 0. A second signal is sent on to the commands.\n"
         "\n"
         "Exit status: 0 normal end, 1 connection, server or other error, 2 usage error.\n";
}

ParseResult ParseOptions(const std::vector<std::string>& args) {
  ParseResult result;
  Options& options = result.options;
  bool once = false;
  bool has_max_jobs = false;
  std::size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "-h" || arg == "--help") {
      result.status = ParseStatus::kHelp;
      return result;
    }
    if (arg == "-v" || arg == "--verbose") {
      options.verbose = true;
      continue;
    }
    if (arg == "--once") {
      once = true;
      continue;
    }
    if (arg.rfind("-", 0) != 0) break;  // the command, without a "--" before it
    // --name VALUE or --name=VALUE
    std::string name = arg;
    std::string value;
    const std::size_t equals = arg.find('=');
    if (equals != std::string::npos) {
      name = arg.substr(0, equals);
      value = arg.substr(equals + 1);
    }
    const bool takes_value = name == "--queue" || name == "--dsn" || name == "--concurrency" ||
                             name == "--prefetch" || name == "--lease" || name == "--wait" ||
                             name == "--max-jobs" || name == "--unknown-exit-code" ||
                             name == "--snooze-exit-code" || name == "--snooze-delay" ||
                             name == "--kill-grace";
    if (!takes_value) return Error("unknown option " + name);
    if (equals == std::string::npos) {
      if (i + 1 >= args.size()) return Error(name + " needs a value");
      value = args[++i];
    }
    long number = 0;
    if (name == "--queue") {
      if (value.empty()) return Error("--queue must not be empty");
      if (std::find(options.queues.begin(), options.queues.end(), value) != options.queues.end()) {
        return Error("--queue " + value + " is given twice");
      }
      options.queues.push_back(value);
    } else if (name == "--dsn") {
      options.dsn = value;
    } else if (name == "--concurrency") {
      if (!ParseNumber(value, 1, kMaxConcurrency, &number)) {
        return Error("--concurrency must be a number from 1 to " + std::to_string(kMaxConcurrency));
      }
      options.concurrency = static_cast<int>(number);
    } else if (name == "--prefetch") {
      if (!ParseNumber(value, 0, kMaxPrefetch, &number)) {
        return Error("--prefetch must be a number from 0 to " + std::to_string(kMaxPrefetch));
      }
      options.prefetch = static_cast<int>(number);
    } else if (name == "--lease") {
      if (value.empty()) return Error("--lease must not be empty");
      options.lease = value;
    } else if (name == "--wait") {
      if (value.empty()) return Error("--wait must not be empty");
      options.wait = value;
    } else if (name == "--unknown-exit-code" || name == "--snooze-exit-code") {
      if (!ParseNumber(value, 1, 255, &number)) {
        return Error(name + " must be a number from 1 to 255");
      }
      (name == "--unknown-exit-code" ? options.unknown_exit_code : options.snooze_exit_code) =
          static_cast<int>(number);
    } else if (name == "--snooze-delay") {
      if (value.empty()) return Error("--snooze-delay must not be empty");
      options.snooze_delay = value;
    } else if (name == "--kill-grace") {
      if (value.empty()) return Error("--kill-grace must not be empty");
      options.kill_grace = value;
    } else {  // --max-jobs
      if (!ParseNumber(value, 1, 1000000000L, &number)) {
        return Error("--max-jobs must be a positive number");
      }
      options.max_jobs = number;
      has_max_jobs = true;
    }
  }
  options.command.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  if (once && has_max_jobs) return Error("--once and --max-jobs cannot be used together");
  if (once) options.max_jobs = 1;
  if (options.unknown_exit_code != 0 && options.unknown_exit_code == options.snooze_exit_code) {
    return Error("--unknown-exit-code and --snooze-exit-code must differ");
  }
  if (options.queues.empty()) return Error("--queue is required");
  if (options.command.empty() || options.command.front().empty()) {
    return Error("a command is required after --");
  }
  result.status = ParseStatus::kRun;
  return result;
}

}  // namespace pgq::cli
