// pgq-worker's event loop: one thread, one poll() over the signal pipe, the
// claiming connection's socket and every running command's pipes.
//
// Two connections: `claims` carries one pgq.claim_traced(..., wait) at a time, which
// blocks in the server until a job is committed (no polling from here);
// `control` carries the short fenced calls (complete, fail, extend, release),
// so a finished command is reported while a claim is still waiting.
//
// The loop is in worker.cpp; recording outcomes (and retrying them) in
// outcome.cpp; the heartbeat (extend, progress, cancellation) in heartbeat.cpp.
#pragma once

#include <chrono>
#include <list>
#include <optional>
#include <random>
#include <string>

#include "failure_text.h"
#include "job_files.h"
#include "options.h"
#include "pq.h"
#include "process.h"

namespace pgq::cli {

using Clock = std::chrono::steady_clock;

// The lease the worker asks for, checked by the server before it starts.
struct LeaseSetting {
  std::string text;  // the --lease interval; empty: the queue's default
  double seconds = 0;
};

// A claimed job. Ids and attempts stay the text the server sent: they go
// back to it as parameters unchanged.
struct Job {
  std::string id;
  std::string queue;  // its own: one of --queue
  std::string attempt;
  std::string max_attempts;
  std::string payload;
  // Its W3C trace context (pgq.claim_traced), none when it has none.
  std::optional<std::string> traceparent;
  std::optional<std::string> tracestate;
  std::string lease;  // what pgq.extend renews the lease with
  Clock::duration lease_length{};
  Clock::duration half_lease{};
  Clock::time_point next_extend;
  // When the lease ends, on this clock: from the claim, moved on by each
  // extend that worked (from when it was sent).
  Clock::time_point lease_end;
  bool lease_lost = false;
};

struct RunningJob {
  Job job;
  pid_t pid = -1;  // also its process group
  Fd stdin_fd;
  std::string input;  // the payload and a newline
  std::size_t written = 0;
  Fd stderr_fd;
  StderrTail tail;
  JobFiles files;
  std::string progress_seen;     // the progress file's text last sent (or refused)
  std::string progress_refused;  // why the progress file was last not read
  // Cancelled (pgq.cancel): SIGTERM sent, SIGKILL due at kill_at.
  bool cancelled = false;
  bool killed = false;
  Clock::time_point kill_at;
};

// A job's outcome to record: tried at once, and again after a connection
// error (retry.h) until it is recorded or the job's lease ends.
struct Outcome {
  enum class Kind { kComplete, kFail, kSnooze, kRelease };
  Kind kind = Kind::kComplete;
  Job job;
  std::optional<std::string> result;  // kComplete: the result file's text
  std::string error;                  // kFail: pgq.fail's text
  std::string status;                 // kFail: how the command ended, for the log
  std::string delay;                  // kSnooze: the interval
  bool delay_from_file = false;       // kSnooze: written by the command
  int tries = 0;
  std::chrono::milliseconds backoff{};
  Clock::time_point next_try;
};

// "job 42 (attempt 1)", for the log.
std::string JobName(const Job& job);

// The error of a statement the server did not take (retry.h).
bool IsConnectionLoss(const DbError& e);

class Worker {
 public:
  // kill_grace: how long a cancelled job's command has from SIGTERM to its end.
  Worker(Options options, LeaseSetting lease, Clock::duration kill_grace, Connection claims,
         Connection control, SignalPipe& signals);

  // Until a stop signal, --once / --max-jobs, or an error; the exit status.
  int Run();

 private:
  bool CanClaimMore() const;
  bool Finished() const;
  void MaybeClaim();
  void OnClaimReadable();
  void ClaimCancelled(const DbError& e);
  void StartJobs();
  void Start(Job job);
  void PollOnce();
  void OnSignal(int signo);
  void StopClaiming();
  void CancelClaim();
  void Fatal(const std::string& what, const std::string& why);
  void WriteInput(RunningJob& running);
  void ReadStderr(RunningJob& running);
  void ReapChildren();
  void Report(RunningJob& running, int wait_status);
  void SetResult(RunningJob& running, Outcome& outcome) const;
  void SetSnoozeDelay(RunningJob& running, Outcome& outcome) const;
  // outcome.cpp
  void Release(const Job& job);
  void Settle(Outcome outcome);
  bool TrySettle(Outcome& outcome);
  bool Record(Outcome& outcome, const std::string& lost);
  void RetryDueOutcomes();
  // heartbeat.cpp
  enum class ExtendResult { kExtended, kLost, kNotNow };
  void ExtendDueLeases();
  ExtendResult Extend(Job& job, Clock::time_point now);
  void LeaseLost(Job& job);
  void CheckCancelled(RunningJob& running, Clock::time_point now);
  void Cancel(RunningJob& running, Clock::time_point now);
  void KillOverdue();
  void SendProgress(RunningJob& running);
  int PollTimeoutMillis() const;
  void Log(const std::string& line) const;
  void Verbose(const std::string& line) const;

  Options options_;
  std::string claim_sql_;  // pgq.claim_traced of the one queue, or of all of them
  LeaseSetting lease_;
  Clock::duration kill_grace_;
  Connection claims_;
  Connection control_;
  SignalPipe& signals_;
  std::list<Job> buffered_;        // claimed, not started
  std::list<RunningJob> running_;  // stable addresses while polled
  std::list<Outcome> outcomes_;    // to record again, after a connection error
  bool claim_in_flight_ = false;
  bool stopping_ = false;  // no more claims: signal, error, or nothing to do
  bool idle_ = false;      // --once / --max-jobs: a claim found nothing
  bool failed_ = false;    // exit 1
  int stop_signals_ = 0;
  Clock::time_point next_cancel_;  // while stopping with a claim out
  // After a claim was cancelled (57014, not by us): the pause before the
  // next, from 0.1 s doubled up to 2 s while claims keep being cancelled.
  std::chrono::milliseconds claim_backoff_{0};
  Clock::time_point next_claim_;
  long claimed_ = 0;
  std::mt19937 random_{std::random_device{}()};  // the retries' jitter
};

}  // namespace pgq::cli
