#include "worker.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <system_error>
#include <vector>

#include "lease.h"
#include "program.h"
#include "retry.h"

namespace pgq::cli {

namespace {

// The rows of pgq.claim_traced (3.1: pgq.claim's columns and the job's trace
// context), and how long each lease runs from now as the server sees it
// (lease_until is set by the claim from pgq.clock()), so the heartbeat needs
// neither the queue's settings nor a synchronised clock; then the job's
// queue, traceparent and tracestate. One --queue: pgq.claim_traced($1::text,
// ...). Several: pgq.claim_traced(ARRAY[$1::text, $2::text, ...], ...), one
// parameter per queue, so a name is never part of the SQL text. Then the
// parameters n, lease and wait.
std::string ClaimSql(std::size_t queue_count) {
  std::string queues;
  for (std::size_t i = 1; i <= queue_count; ++i) {
    queues += (i > 1 ? ", $" : "$") + std::to_string(i) + "::text";
  }
  if (queue_count > 1) queues = "ARRAY[" + queues + "]";
  const std::string n = "$" + std::to_string(queue_count + 1);
  const std::string lease = "$" + std::to_string(queue_count + 2);
  const std::string wait = "$" + std::to_string(queue_count + 3);
  return "SELECT c.id, c.attempt, c.max_attempts, c.payload::text,"
         "       pg_catalog.date_part('epoch', c.lease_until OPERATOR(pg_catalog.-) pgq.clock()),"
         "       c.queue, c.traceparent, c.tracestate"
         "  FROM pgq.claim_traced(" +
         queues + ", " + n + "::integer, " + lease + "::interval, wait => " + wait +
         "::interval) AS c";
}

// A cancel that reaches the server before the claim has started is lost
// (there is no statement to cancel yet): until the claim ends, it is sent
// again this often.
constexpr auto kCancelRepeat = std::chrono::milliseconds(500);

}  // namespace

std::string JobName(const Job& job) { return "job " + job.id + " (attempt " + job.attempt + ")"; }

bool IsConnectionLoss(const DbError& e) { return IsConnectionError(e.sqlstate(), e.severity()); }

Worker::Worker(Options options, LeaseSetting lease, Clock::duration kill_grace, Connection claims,
               Connection control, SignalPipe& signals)
    : options_(std::move(options)),
      claim_sql_(ClaimSql(options_.queues.size())),
      lease_(std::move(lease)),
      kill_grace_(kill_grace),
      claims_(std::move(claims)),
      control_(std::move(control)),
      signals_(signals) {}

int Worker::Run() {
  for (;;) {
    StartJobs();
    MaybeClaim();
    if (Finished()) break;
    PollOnce();
  }
  return failed_ ? 1 : 0;
}

bool Worker::CanClaimMore() const {
  return !stopping_ && !idle_ && (options_.max_jobs == 0 || claimed_ < options_.max_jobs);
}

bool Worker::Finished() const {
  return !claim_in_flight_ && running_.empty() && buffered_.empty() && outcomes_.empty() &&
         !CanClaimMore();
}

void Worker::MaybeClaim() {
  if (claim_in_flight_ || !CanClaimMore()) return;
  if (claim_backoff_.count() > 0 && Clock::now() < next_claim_) return;
  const long held = static_cast<long>(running_.size() + buffered_.size());
  long room = options_.concurrency + options_.prefetch - held;
  if (options_.max_jobs > 0) room = std::min(room, options_.max_jobs - claimed_);
  if (room <= 0) return;  // without --prefetch: no claim until a slot is free
  const std::string n = std::to_string(room);
  std::vector<const char*> params;
  for (const std::string& queue : options_.queues) params.push_back(queue.c_str());
  params.push_back(n.c_str());
  params.push_back(lease_.text.empty() ? nullptr : lease_.text.c_str());
  params.push_back(options_.wait.c_str());
  try {
    claims_.Send(claim_sql_.c_str(), params);
    claim_in_flight_ = true;
  } catch (const DbError& e) {
    Fatal("pgq.claim", e.Describe());
  }
}

void Worker::OnClaimReadable() {
  Result result;
  try {
    result = claims_.Consume();
    if (!result) return;  // more to come
  } catch (const DbError& e) {
    claim_in_flight_ = false;
    if (e.sqlstate() != "57014") {
      Fatal("pgq.claim", e.Describe());
    } else if (!stopping_) {
      // query_canceled, not by us (our own cancel is sent when a stop signal
      // came): pg_cancel_backend, a statement_timeout, or a lock wait
      // cancelled while ALTER EXTENSION waits. Nothing was claimed (the
      // claim's transaction rolled back): claim again after a pause.
      ClaimCancelled(e);
    }
    return;
  }
  claim_in_flight_ = false;
  claim_backoff_ = std::chrono::milliseconds::zero();
  const int rows = PQntuples(result.get());
  if (rows == 0) {
    // Bounded runs (--once, --max-jobs) end when the queue has nothing for
    // them within --wait; the others claim again.
    if (options_.max_jobs > 0) idle_ = true;
    return;
  }
  const Clock::time_point now = Clock::now();
  for (int row = 0; row < rows; ++row) {
    Job job;
    job.id = PQgetvalue(result.get(), row, 0);
    job.attempt = PQgetvalue(result.get(), row, 1);
    job.max_attempts = PQgetvalue(result.get(), row, 2);
    job.payload = PQgetvalue(result.get(), row, 3);
    job.queue = PQgetvalue(result.get(), row, 5);
    if (!PQgetisnull(result.get(), row, 6)) job.traceparent = PQgetvalue(result.get(), row, 6);
    if (!PQgetisnull(result.get(), row, 7)) job.tracestate = PQgetvalue(result.get(), row, 7);
    const Lease lease = LeaseOf(lease_.text, lease_.seconds, PQgetvalue(result.get(), row, 4));
    job.lease = lease.text;
    job.lease_length = lease.length;
    job.half_lease = lease.half;
    job.next_extend = now + job.half_lease;
    job.lease_end = now + job.lease_length;
    ++claimed_;
    if (stopping_) {
      Release(job);  // the claim ended after a stop signal
    } else {
      buffered_.push_back(std::move(job));
    }
  }
}

void Worker::ClaimCancelled(const DbError& e) {
  claim_backoff_ = claim_backoff_.count() == 0 ? kFirstRetry : NextBackoff(claim_backoff_);
  const std::chrono::milliseconds pause =
      Jittered(claim_backoff_, std::uniform_real_distribution<double>(0, 1)(random_));
  next_claim_ = Clock::now() + pause;
  Log("pgq.claim was cancelled (" + e.Describe() + "): claiming again in " +
      std::to_string(pause.count()) + " ms");
}

void Worker::StartJobs() {
  while (!stopping_ && static_cast<int>(running_.size()) < options_.concurrency &&
         !buffered_.empty()) {
    Job job = std::move(buffered_.front());
    buffered_.pop_front();
    if (job.lease_lost) {
      Log(JobName(job) + ": not started, its lease was lost while it waited");
      continue;
    }
    Start(std::move(job));
  }
}

void Worker::Start(Job job) {
  Variables variables = {{"PGQ_JOB_ID", job.id},
                         {"PGQ_JOB_ATTEMPT", job.attempt},
                         {"PGQ_JOB_MAX_ATTEMPTS", job.max_attempts},
                         {"PGQ_QUEUE", job.queue}};
  std::vector<std::string> removed;
  AddTraceContext(job.traceparent, job.tracestate, &variables, &removed);
  JobFiles files;
  SpawnedProcess process;
  try {
    files = JobFiles::Create();
    for (auto& variable : files.Environment()) variables.push_back(std::move(variable));
    process = Spawn(options_.command, JobEnvironment(variables, removed));
  } catch (const std::system_error& e) {
    // Not the job's fault: give it back rather than spend its attempts.
    Release(job);
    Fatal("cannot start the command", e.what());
    return;
  }
  RunningJob& running = running_.emplace_back();
  running.job = std::move(job);
  running.pid = process.pid;
  running.stdin_fd = std::move(process.stdin_fd);
  running.stderr_fd = std::move(process.stderr_fd);
  running.files = std::move(files);
  running.input = running.job.payload + "\n";
  const std::string of_queue =
      options_.queues.size() > 1 ? " (queue " + running.job.queue + ")" : std::string();
  Verbose(JobName(running.job) + ": started" + of_queue + ", pid " + std::to_string(running.pid));
  WriteInput(running);
}

void Worker::PollOnce() {
  // fds[0] is the signal pipe, fds[1] the claiming connection while a claim
  // is out; then the pipes of the running commands, owners[i] for fds[i].
  std::vector<pollfd> fds;
  std::vector<RunningJob*> owners;
  fds.push_back({signals_.read_fd(), POLLIN, 0});
  owners.push_back(nullptr);
  const bool polls_claim = claim_in_flight_;
  if (polls_claim) {
    fds.push_back({claims_.socket(), POLLIN, 0});
    owners.push_back(nullptr);
  }
  for (RunningJob& running : running_) {
    if (running.stdin_fd.is_open()) {
      fds.push_back({running.stdin_fd.get(), POLLOUT, 0});
      owners.push_back(&running);
    }
    if (running.stderr_fd.is_open()) {
      fds.push_back({running.stderr_fd.get(), POLLIN, 0});
      owners.push_back(&running);
    }
  }
  if (poll(fds.data(), fds.size(), PollTimeoutMillis()) < 0) {
    if (errno != EINTR) throw std::system_error(errno, std::generic_category(), "poll");
    return;
  }
  for (std::size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents == 0) continue;
    RunningJob* owner = owners[i];
    if (i == 0) {
      for (int signo : signals_.Drain()) OnSignal(signo);
    } else if (polls_claim && i == 1) {
      if (claim_in_flight_) OnClaimReadable();
    } else if (fds[i].events == POLLOUT) {
      WriteInput(*owner);
    } else {
      ReadStderr(*owner);
    }
  }
  ReapChildren();
  KillOverdue();
  ExtendDueLeases();
  RetryDueOutcomes();
  if (stopping_ && claim_in_flight_ && Clock::now() >= next_cancel_) CancelClaim();
}

void Worker::OnSignal(int signo) {
  if (signo == SIGCHLD) return;  // ReapChildren runs after every poll
  ++stop_signals_;
  if (stop_signals_ == 1) {
    Log(std::string(SignalName(signo)) + ": claiming no more jobs; waiting for " +
        std::to_string(running_.size()) +
        " running command(s) to finish (signal again to pass it on to them)");
    StopClaiming();
    return;
  }
  Log(std::string(SignalName(signo)) + ": passing it on to " + std::to_string(running_.size()) +
      " running command(s)");
  for (const RunningJob& running : running_) (void)kill(-running.pid, signo);
}

void Worker::StopClaiming() {
  if (stopping_) return;
  stopping_ = true;
  if (claim_in_flight_) CancelClaim();  // its rows, if any, are released when they come
  std::list<Job> unstarted = std::move(buffered_);
  buffered_.clear();
  for (const Job& job : unstarted) Release(job);
}

void Worker::CancelClaim() {
  claims_.Cancel();
  next_cancel_ = Clock::now() + kCancelRepeat;
}

void Worker::Fatal(const std::string& what, const std::string& why) {
  Log("error: " + what + ": " + why);
  failed_ = true;
  StopClaiming();
}

void Worker::WriteInput(RunningJob& running) {
  while (running.written < running.input.size()) {
    const ssize_t n = write(running.stdin_fd.get(), running.input.data() + running.written,
                            running.input.size() - running.written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;  // poll says when
    if (n < 0) break;  // EPIPE: the command does not read its stdin
    running.written += static_cast<std::size_t>(n);
  }
  running.stdin_fd.Close();  // end of input
}

void Worker::ReadStderr(RunningJob& running) {
  char buffer[16384];
  for (;;) {
    const ssize_t n = read(running.stderr_fd.get(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) break;  // end of file
    // Shown as it comes (the worker's stderr is the commands' log) and the
    // end kept for pgq.fail.
    WriteStderr(buffer, static_cast<std::size_t>(n));
    running.tail.Append(std::string_view(buffer, static_cast<std::size_t>(n)));
  }
  running.stderr_fd.Close();
}

void Worker::ReapChildren() {
  for (;;) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;  // none ended (0), or no children left (ECHILD)
    const auto it = std::find_if(running_.begin(), running_.end(),
                                 [pid](const RunningJob& r) { return r.pid == pid; });
    if (it == running_.end()) continue;
    // What the command wrote is in the pipe now; a background process it
    // left holding the pipe open does not hold up the report.
    if (it->stderr_fd.is_open()) ReadStderr(*it);
    it->stderr_fd.Close();
    it->stdin_fd.Close();
    Report(*it, status);
    running_.erase(it);
  }
}

void Worker::Report(RunningJob& running, int wait_status) {
  const Job& job = running.job;
  const int code = WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : -1;
  if (running.cancelled) {
    // pgq.cancel fenced the claim: complete or fail would be refused.
    Log(JobName(job) + ": cancelled; its command ended (" + DescribeStatus(wait_status) +
        "): not completed nor failed");
  } else if (code == 0) {
    Outcome outcome;
    outcome.kind = Outcome::Kind::kComplete;
    outcome.job = job;
    SetResult(running, outcome);
    Settle(std::move(outcome));
  } else if (code == options_.unknown_exit_code) {
    // No heartbeat for it from now on: it runs again once its lease is over.
    Log(JobName(job) + ": outcome unknown (exit status " + std::to_string(code) +
        "): not completed, failed nor released; it runs again after its lease ends");
  } else if (code == options_.snooze_exit_code) {
    Outcome outcome;
    outcome.kind = Outcome::Kind::kSnooze;
    outcome.job = job;
    SetSnoozeDelay(running, outcome);
    Settle(std::move(outcome));
  } else {
    Outcome outcome;
    outcome.kind = Outcome::Kind::kFail;
    outcome.job = job;
    outcome.error = FailureText(wait_status, running.tail);
    outcome.status = DescribeStatus(wait_status);
    Settle(std::move(outcome));
  }
  const std::string not_removed = running.files.Remove();
  if (!not_removed.empty()) Log("warning: " + JobName(job) + ": " + not_removed);
}

// The result file, if the command wrote one; the server decides whether it
// is JSON (outcome.cpp).
void Worker::SetResult(RunningJob& running, Outcome& outcome) const {
  const FileContent content = ReadJobFile(running.files.result_path(), kMaxJsonFileBytes);
  if (content.status == FileContent::Status::kText) {
    outcome.result = content.text;
  } else if (content.status == FileContent::Status::kRejected) {
    Log("warning: " + JobName(running.job) + ": result file not read (" + content.error +
        "): completed without a result");
  }
}

void Worker::SetSnoozeDelay(RunningJob& running, Outcome& outcome) const {
  const FileContent content = ReadJobFile(running.files.snooze_path(), kMaxSnoozeFileBytes);
  outcome.delay = options_.snooze_delay;
  if (content.status == FileContent::Status::kText) {
    outcome.delay = content.text;
    outcome.delay_from_file = true;
  } else if (content.status == FileContent::Status::kRejected) {
    Log("warning: " + JobName(running.job) + ": snooze file not read (" + content.error +
        "): snoozed for --snooze-delay");
  }
}

int Worker::PollTimeoutMillis() const {
  std::optional<Clock::time_point> next;
  const auto consider = [&next](const Job& job) {
    if (!job.lease_lost && (!next || job.next_extend < *next)) next = job.next_extend;
  };
  for (const Job& job : buffered_) consider(job);
  for (const RunningJob& running : running_) {
    consider(running.job);
    if (running.cancelled && !running.killed && (!next || running.kill_at < *next)) {
      next = running.kill_at;
    }
  }
  for (const Outcome& outcome : outcomes_) {
    consider(outcome.job);
    if (!next || outcome.next_try < *next) next = outcome.next_try;
  }
  if (stopping_ && claim_in_flight_ && (!next || next_cancel_ < *next)) next = next_cancel_;
  if (!claim_in_flight_ && claim_backoff_.count() > 0 && CanClaimMore() &&
      (!next || next_claim_ < *next)) {
    next = next_claim_;
  }
  if (!next) return -1;
  const auto wait = *next - Clock::now();
  if (wait <= Clock::duration::zero()) return 0;
  // Rounded up, so the loop does not wake just before the due time.
  return static_cast<int>(
      std::min<long long>(std::chrono::ceil<std::chrono::milliseconds>(wait).count(), 60000));
}

void Worker::Log(const std::string& line) const { LogLine("pgq-worker", line); }

void Worker::Verbose(const std::string& line) const {
  if (options_.verbose) Log(line);
}

}  // namespace pgq::cli
