// The heartbeat: every half lease, pgq.extend for each job held (running,
// prefetched, or with an outcome waiting to be recorded), then the running
// command's progress file if it changed. An extend that comes back NULL for
// a running job asks pgq.job whether the job was cancelled: if so, the
// command's process group gets SIGTERM, and SIGKILL --kill-grace later.
#include <signal.h>

#include <algorithm>
#include <optional>

#include "retry.h"
#include "worker.h"

namespace pgq::cli {

namespace {

constexpr const char* kExtend = "SELECT pgq.extend($1::bigint, $2::integer, $3::interval)";
constexpr const char* kProgress = "SELECT pgq.progress($1::bigint, $2::integer, $3::text::jsonb)";
constexpr const char* kJobState = "SELECT j.state FROM pgq.job($1::bigint) AS j";

}  // namespace

void Worker::ExtendDueLeases() {
  const Clock::time_point now = Clock::now();
  // An extend that fails for good stops claiming (Fatal), which gives the
  // buffered jobs back and may queue their releases: the lists walked here
  // change under the loop, so the walk ends there (the next pass goes on).
  const bool was_failed = failed_;
  const auto due = [&](const Job& job) { return !job.lease_lost && now >= job.next_extend; };
  const auto go_on = [&] { return was_failed || !failed_; };
  for (Job& job : buffered_) {
    if (!due(job)) continue;
    if (Extend(job, now) == ExtendResult::kLost) LeaseLost(job);
    if (!go_on()) return;
  }
  for (RunningJob& running : running_) {
    if (!due(running.job)) continue;
    const ExtendResult extended = Extend(running.job, now);
    if (extended == ExtendResult::kLost) CheckCancelled(running, now);
    if (!go_on()) return;
    if (extended == ExtendResult::kExtended) SendProgress(running);
  }
  // The heartbeat goes on while an outcome waits to be recorded again.
  for (Outcome& outcome : outcomes_) {
    if (!due(outcome.job)) continue;
    if (Extend(outcome.job, now) == ExtendResult::kLost) LeaseLost(outcome.job);
    if (!go_on()) return;
  }
}

Worker::ExtendResult Worker::Extend(Job& job, Clock::time_point now) {
  job.next_extend = now + job.half_lease;
  try {
    const Result result =
        control_.Exec(kExtend, {job.id.c_str(), job.attempt.c_str(), job.lease.c_str()});
    if (PQgetisnull(result.get(), 0, 0)) return ExtendResult::kLost;
    job.lease_end = now + job.lease_length;  // renewed from when it was asked
    Verbose(JobName(job) + ": lease extended to " + PQgetvalue(result.get(), 0, 0));
    return ExtendResult::kExtended;
  } catch (const DbError& e) {
    if (IsConnectionLoss(e)) {
      // The server is out of reach for now: tried again soon, while the
      // lease lasts (its end does not move until an extend works).
      job.next_extend = now + std::min<Clock::duration>(job.half_lease / 2, kMaxRetry);
      Log("pgq.extend of " + JobName(job) + " failed; retrying: " + e.Describe());
      return ExtendResult::kNotNow;
    }
    Fatal("pgq.extend of " + JobName(job), e.Describe());
    return ExtendResult::kNotNow;
  }
}

void Worker::LeaseLost(Job& job) {
  job.lease_lost = true;
  Log(JobName(job) + ": its lease was lost (expired and claimed again, or gone)");
}

// The claim of a running job no longer holds: cancelled (pgq.cancel), or its
// lease ran out. Only pgq.job tells which.
void Worker::CheckCancelled(RunningJob& running, Clock::time_point now) {
  Job& job = running.job;
  std::optional<std::string> state;
  try {
    const Result result = control_.Exec(kJobState, {job.id.c_str()});
    if (PQntuples(result.get()) > 0) state = PQgetvalue(result.get(), 0, 0);
  } catch (const DbError& e) {
    if (IsConnectionLoss(e)) {
      // Asked again at the next heartbeat, after another extend.
      job.next_extend = now + std::min<Clock::duration>(job.half_lease / 2, kMaxRetry);
      Log("pgq.job of " + JobName(job) + " failed; asking again: " + e.Describe());
      return;
    }
    Log("error: pgq.job of " + JobName(job) + ": " + e.Describe());
  }
  // No row: cancelled, and its dead-letter row already purged.
  if (!state || *state == "cancelled") {
    Cancel(running, now);
  } else {
    LeaseLost(job);  // as before 1.2: the command runs on; its outcome may be refused
  }
}

void Worker::Cancel(RunningJob& running, Clock::time_point now) {
  running.job.lease_lost = true;  // no more heartbeats, nor progress
  running.cancelled = true;
  running.kill_at = now + kill_grace_;
  (void)kill(-running.pid, SIGTERM);
  const auto grace = std::chrono::duration_cast<std::chrono::milliseconds>(kill_grace_).count();
  Log(JobName(running.job) + ": cancelled; SIGTERM sent to its command (pid " +
      std::to_string(running.pid) + "), SIGKILL in " + std::to_string(grace) +
      " ms if it has not ended");
}

void Worker::KillOverdue() {
  const Clock::time_point now = Clock::now();
  for (RunningJob& running : running_) {
    if (!running.cancelled || running.killed || now < running.kill_at) continue;
    running.killed = true;
    (void)kill(-running.pid, SIGKILL);
    Log(JobName(running.job) + ": cancelled; its command did not end within --kill-grace: SIGKILL");
  }
}

void Worker::SendProgress(RunningJob& running) {
  const Job& job = running.job;
  const FileContent content = ReadJobFile(running.files.progress_path(), kMaxJsonFileBytes);
  if (content.status == FileContent::Status::kNone) return;
  if (content.status == FileContent::Status::kRejected) {
    // The same refusal is not logged at every heartbeat.
    if (running.progress_refused != content.error) {
      Log("warning: " + JobName(job) + ": progress file skipped: " + content.error);
    }
    running.progress_refused = content.error;
    return;
  }
  running.progress_refused.clear();
  if (content.text == running.progress_seen) return;  // unchanged since the last heartbeat
  try {
    const Result result =
        control_.Exec(kProgress, {job.id.c_str(), job.attempt.c_str(), content.text.c_str()});
    running.progress_seen = content.text;
    Verbose(JobName(job) + ": progress sent");
  } catch (const DbError& e) {
    if (IsConnectionLoss(e)) return;  // sent at the next heartbeat
    // Not JSON, too large, ...: skipped until the command writes another.
    running.progress_seen = content.text;
    Log("warning: " + JobName(job) + ": progress file skipped: " + e.what() +
        (e.sqlstate().empty() ? "" : " (SQLSTATE " + e.sqlstate() + ")"));
  }
}

}  // namespace pgq::cli
