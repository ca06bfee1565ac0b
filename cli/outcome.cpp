// Recording a job's outcome: pgq.complete (with the command's result),
// pgq.fail, pgq.snooze, pgq.release; tried again after a connection error
// (retry.h) until it is recorded or the job's lease ends.
#include <cstring>

#include "retry.h"
#include "worker.h"

namespace pgq::cli {

namespace {

constexpr const char* kComplete = "SELECT pgq.complete($1::bigint, $2::integer)";
// The result goes as text, cast by the server: what it does not take as
// jsonb fails the statement as a whole (nothing done), and the job is then
// completed without it.
constexpr const char* kCompleteWithResult =
    "SELECT pgq.complete($1::bigint, $2::integer, $3::text::jsonb)";
constexpr const char* kFail = "SELECT pgq.fail($1::bigint, $2::integer, $3::text)";
constexpr const char* kSnooze = "SELECT pgq.snooze($1::bigint, $2::integer, $3::text::interval)";
constexpr const char* kRelease = "SELECT pgq.release($1::bigint, $2::integer)";

const char* FunctionOf(Outcome::Kind kind) {
  switch (kind) {
    case Outcome::Kind::kComplete:
      return "pgq.complete";
    case Outcome::Kind::kFail:
      return "pgq.fail";
    case Outcome::Kind::kSnooze:
      return "pgq.snooze";
    case Outcome::Kind::kRelease:
      return "pgq.release";
  }
  return "";
}

bool IsTrue(const Result& result) { return std::strcmp(PQgetvalue(result.get(), 0, 0), "t") == 0; }

// Whether the server refused the statement for a value the command wrote:
// class 22 (data exception: not JSON, not an interval, not UTF-8, out of
// range) or 54 (too large: pgq.max_payload_bytes). Other errors (rights, a
// lock timeout) would refuse the statement without it as well, or are
// worth reporting as they are.
bool BlamesTheValue(const DbError& e) {
  return e.sqlstate().rfind("22", 0) == 0 || e.sqlstate().rfind("54", 0) == 0;
}

// The first line of an error, for a one-line warning.
std::string FirstLine(const DbError& e) {
  std::string text = e.what();
  if (!e.sqlstate().empty()) text += " (SQLSTATE " + e.sqlstate() + ")";
  return text;
}

}  // namespace

void Worker::Release(const Job& job) {
  Outcome outcome;
  outcome.kind = Outcome::Kind::kRelease;
  outcome.job = job;
  Settle(std::move(outcome));
}

void Worker::Settle(Outcome outcome) {
  outcome.backoff = kFirstRetry;
  if (!TrySettle(outcome)) outcomes_.push_back(std::move(outcome));
}

// One try at recording an outcome: true when it is over (recorded, or given
// up), false when it is to be tried again at outcome.next_try.
bool Worker::TrySettle(Outcome& outcome) {
  const Job& job = outcome.job;
  ++outcome.tries;
  // A repeat of a statement whose first try went through before the
  // connection broke finds the attempt finished: like a lost lease.
  const std::string lost =
      outcome.tries > 1 ? " (or an earlier try went through before the connection broke)" : "";
  try {
    return Record(outcome, lost);
  } catch (const DbError& e) {
    const Clock::time_point now = Clock::now();
    const std::chrono::milliseconds pause =
        Jittered(outcome.backoff, std::uniform_real_distribution<double>(0, 1)(random_));
    if (IsConnectionLoss(e) && now + pause < job.lease_end) {
      Log(std::string(FunctionOf(outcome.kind)) + " of " + JobName(job) + " failed; retrying in " +
          std::to_string(pause.count()) + " ms: " + e.Describe());
      outcome.next_try = now + pause;
      outcome.backoff = NextBackoff(outcome.backoff);
      return false;
    }
    if (!BlamesTheValue(e)) {
      // Reported below.
    } else if (outcome.kind == Outcome::Kind::kComplete && outcome.result) {
      // What the command wrote is not the server's jsonb (not JSON, not
      // UTF-8, too large...): never worth losing the completion for. The
      // rejected statement did nothing, so this try does not count.
      Log("warning: " + JobName(job) + ": its result file was not accepted as jsonb (" +
          FirstLine(e) + "): completed without a result");
      outcome.result.reset();
      --outcome.tries;
      return TrySettle(outcome);
    } else if (outcome.kind == Outcome::Kind::kSnooze && outcome.delay_from_file) {
      Log("warning: " + JobName(job) + ": its snooze file's '" + outcome.delay +
          "' was not accepted as a delay (" + FirstLine(e) + "): snoozed for --snooze-delay");
      outcome.delay = options_.snooze_delay;
      outcome.delay_from_file = false;
      --outcome.tries;
      return TrySettle(outcome);
    }
    const std::string after =
        outcome.tries > 1 ? " (after " + std::to_string(outcome.tries) + " tries)" : "";
    if (outcome.kind == Outcome::Kind::kRelease) {
      // Its lease expires by itself; the attempt then counts.
      Log("error: pgq.release of " + JobName(job) + after + ": " + e.Describe());
      failed_ = true;
    } else {
      Fatal("reporting " + JobName(job) + after, e.Describe());
    }
    return true;
  }
}

// Sends the outcome's statement and logs what came of it. Throws DbError.
bool Worker::Record(Outcome& outcome, const std::string& lost) {
  const Job& job = outcome.job;
  const char* id = job.id.c_str();
  const char* attempt = job.attempt.c_str();
  switch (outcome.kind) {
    case Outcome::Kind::kComplete: {
      const Result result = outcome.result ? control_.Exec(kCompleteWithResult,
                                                           {id, attempt, outcome.result->c_str()})
                                           : control_.Exec(kComplete, {id, attempt});
      if (IsTrue(result)) {
        Verbose(JobName(job) + ": completed" + (outcome.result ? ", with its result" : ""));
      } else {
        Log(JobName(job) + ": done, but its claim was lost to a newer one" + lost +
            ": not completed");
      }
      break;
    }
    case Outcome::Kind::kFail: {
      const Result result = control_.Exec(kFail, {id, attempt, outcome.error.c_str()});
      const std::string result_text = PQgetvalue(result.get(), 0, 0);
      if (result_text == "retry") {
        Log(JobName(job) + ": failed (" + outcome.status + "), will be retried");
      } else if (result_text == "dead") {
        Log(JobName(job) + ": failed (" + outcome.status + "), attempts exhausted: dead-lettered");
      } else {
        Log(JobName(job) + ": failed (" + outcome.status +
            "), but its claim was lost to a newer one" + lost);
      }
      break;
    }
    case Outcome::Kind::kSnooze: {
      const Result result = control_.Exec(kSnooze, {id, attempt, outcome.delay.c_str()});
      if (IsTrue(result)) {
        Verbose(JobName(job) + ": snoozed for " + outcome.delay + " (attempt not spent)");
      } else {
        Log(JobName(job) + ": snooze asked, but its claim was lost to a newer one" + lost +
            ": not snoozed");
      }
      break;
    }
    case Outcome::Kind::kRelease: {
      const Result result = control_.Exec(kRelease, {id, attempt});
      Verbose(JobName(job) + ": released, not started");
      break;
    }
  }
  return true;
}

void Worker::RetryDueOutcomes() {
  // TrySettle may add to the list (a release after a fatal error): those
  // come at its end, and are tried once they are due.
  for (auto it = outcomes_.begin(); it != outcomes_.end();) {
    if (Clock::now() >= it->next_try && TrySettle(*it)) {
      it = outcomes_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace pgq::cli
