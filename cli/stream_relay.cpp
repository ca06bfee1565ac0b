#include "stream_relay.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>
#include <unordered_map>

#include "program.h"
#include "retry.h"

namespace pgq::cli {

namespace {

// The batch, with pgq.publish's envelope unwrapped by the server (as the
// queue relay's claim does): batch id, event id, body, topic, group key,
// event id of the outbox, appended_at (ISO 8601 UTC), the routing key field,
// the event's trace context (pgq.next_batch_traced, 3.1: traceparent,
// tracestate, NULL when it has none).
// $1 stream, $2 consumer, $3 max events, $4 wait, $5 routing key field.
constexpr const char* kNextBatch =
    "SELECT b.batch_id, b.event_id, x.body::text,"
    "       CASE WHEN e.is_event THEN pg_catalog.jsonb_object_field_text(b.payload, 'topic') END,"
    "       CASE WHEN e.is_event THEN pg_catalog.jsonb_object_field_text(b.payload, 'group_key')"
    "       END,"
    "       CASE WHEN e.is_event THEN pg_catalog.jsonb_object_field_text(b.payload, 'event_id')"
    "       END,"
    "       pg_catalog.to_char(pg_catalog.timezone('UTC', b.appended_at),"
    "                          'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'),"
    "       CASE WHEN pg_catalog.jsonb_typeof(x.body) OPERATOR(pg_catalog.=) 'object'"
    "            THEN pg_catalog.jsonb_object_field_text(x.body, $5::text) END,"
    "       b.traceparent, b.tracestate"
    "  FROM pgq.next_batch_traced($1::text, $2::text, $3::integer, $4::interval) AS b"
    " CROSS JOIN LATERAL (SELECT pg_catalog.jsonb_typeof(b.payload) OPERATOR(pg_catalog.=) "
    "                            'object'"
    "                        AND pg_catalog.jsonb_exists_all(b.payload,"
    "                                                        '{event_id,topic,payload}')"
    "                     AS is_event) AS e"
    " CROSS JOIN LATERAL (SELECT CASE WHEN e.is_event"
    "                            THEN pg_catalog.jsonb_object_field(b.payload, 'payload')"
    "                            ELSE b.payload END AS body) AS x";
constexpr const char* kRegister = "SELECT pgq.register_consumer($1::text, $2::text)";
constexpr const char* kFinish = "SELECT pgq.finish_batch($1::bigint)";
// The single-active guard (issue 30 R1): a session lock only
// pgq.acquire_consumer takes, after checking the consume right; 2.0's
// advisory lock key could be taken first by any role.
constexpr const char* kAcquire = "SELECT pgq.acquire_consumer($1::text, $2::text)";
constexpr const char* kRelease = "SELECT pgq.release_consumer($1::text, $2::text)";
// A catalog still on 2.0 (before ALTER EXTENSION pgq_cpp UPDATE) has no
// acquire_consumer: the relay then takes 2.0's advisory lock, and says so.
constexpr const char* kHasGuard =
    "SELECT pg_catalog.to_regprocedure('pgq.acquire_consumer(text,text)') IS NOT NULL";
constexpr const char* kTryLock =
    "SELECT pg_catalog.pg_try_advisory_lock(pg_catalog.hashtextextended("
    "         'pgq-relay ' OPERATOR(pg_catalog.||) $1::text OPERATOR(pg_catalog.||) ' '"
    "         OPERATOR(pg_catalog.||) $2::text, 0))";
constexpr const char* kUnlock =
    "SELECT pg_catalog.pg_advisory_unlock(pg_catalog.hashtextextended("
    "         'pgq-relay ' OPERATOR(pg_catalog.||) $1::text OPERATOR(pg_catalog.||) ' '"
    "         OPERATOR(pg_catalog.||) $2::text, 0))";

constexpr std::chrono::milliseconds kMaxBrokerRetry{5000};
constexpr int kPollMillis = 1000;

std::optional<std::string> Field(const PGresult* rows, int row, int column) {
  if (PQgetisnull(rows, row, column)) return std::nullopt;
  return std::string(PQgetvalue(rows, row, column));
}

}  // namespace

StreamRelay::StreamRelay(RelayOptions options, std::chrono::milliseconds shutdown_timeout,
                         std::chrono::milliseconds stats_interval, std::unique_ptr<Broker> broker,
                         Connection db, SignalPipe& signals)
    : options_(std::move(options)),
      shutdown_timeout_(shutdown_timeout),
      stats_interval_(stats_interval),
      broker_(std::move(broker)),
      db_(std::move(db)),
      signals_(signals) {
  next_stats_ = Clock::now() + stats_interval_;
}

void StreamRelay::Log(const std::string& line) const { LogLine("pgq-relay", line); }

void StreamRelay::DrainSignals() {
  for (const int signo : signals_.Drain()) {
    if (signo == SIGCHLD || stopping_) continue;
    stopping_ = true;
    stop_deadline_ = Clock::now() + shutdown_timeout_;
    Log(std::string(signo == SIGTERM  ? "SIGTERM"
                    : signo == SIGINT ? "SIGINT"
                                      : "signal") +
        ": finishing the batch in flight, reading no more");
  }
}

bool StreamRelay::SleepUnlessStopped(std::chrono::milliseconds pause) {
  pollfd fd{signals_.read_fd(), POLLIN, 0};
  (void)poll(&fd, 1, static_cast<int>(pause.count()));
  DrainSignals();
  return !stopping_;
}

// A connection lost (or refused, or replaced after a nack) is tried again
// after a backoff that only a confirm resets: a broker that takes the
// connection and then nacks every message is not hammered.
bool StreamRelay::ConnectBroker() {
  if (broker_->connected()) return true;
  const auto now = Clock::now();
  if (now < next_broker_try_) {
    SleepUnlessStopped(
        std::chrono::duration_cast<std::chrono::milliseconds>(next_broker_try_ - now));
    if (Clock::now() < next_broker_try_) return false;
  }
  next_broker_try_ = Clock::now() + broker_backoff_;
  broker_backoff_ = std::min(2 * broker_backoff_, kMaxBrokerRetry);
  try {
    broker_->Connect();
    Log("connected to " + broker_->Describe());
    last_broker_error_.clear();
    return true;
  } catch (const BrokerError& e) {
    if (e.what() != last_broker_error_) Log(std::string(e.what()) + "; trying again");
    last_broker_error_ = e.what();
    return false;
  }
}

// Whether the database has pgq.acquire_consumer (2.0.1), asked once per
// session: an ALTER EXTENSION UPDATE is seen after the next reconnect.
bool StreamRelay::HasGuard() {
  if (guard_probed_ != db_.reconnects() + 1) {
    Result has = db_.Exec(kHasGuard, {});
    guard_probed_ = db_.reconnects() + 1;
    has_guard_ = PQgetvalue(has.get(), 0, 0)[0] == 't';
    if (!has_guard_) {
      Log("warning: the database's pgq_cpp is older than 2.0.1 (no pgq.acquire_consumer): taking "
          "2.0's advisory lock, which any role can take first; run ALTER EXTENSION pgq_cpp "
          "UPDATE");
    }
  }
  return has_guard_;
}

// The single-active guard that makes this the one relay of the stream and
// consumer; waits (a standby) while another relay holds it. Connection
// errors are waited out with backoff, as everywhere else; any other error
// (no consume right: 42501) stops the relay.
bool StreamRelay::TakeLock() {
  bool told = false;
  std::chrono::milliseconds backoff = kFirstRetry;
  for (;;) {
    try {
      Result held = db_.Exec(HasGuard() ? kAcquire : kTryLock,
                             {options_.stream.c_str(), options_.consumer.c_str()});
      if (PQgetvalue(held.get(), 0, 0)[0] == 't') {
        lock_session_ = db_.reconnects();
        if (told) Log("took over stream " + options_.stream + " as consumer " + options_.consumer);
        return true;
      }
      backoff = kFirstRetry;
      if (!told) {
        Log("another pgq-relay is relaying stream " + options_.stream + " as consumer " +
            options_.consumer + "; standing by");
        told = true;
      }
      if (!SleepUnlessStopped(std::chrono::milliseconds(1000))) return false;
    } catch (const DbError& e) {
      if (!IsConnectionError(e.sqlstate(), e.severity())) throw;
      Log("taking the stream's lock: " + e.Describe() + "; trying again");
      if (!SleepUnlessStopped(backoff)) return false;
      backoff = NextBackoff(backoff);
      (void)db_.Reset();
    }
  }
}

// The guard belongs to a session: after any reconnect (libpq's own, inside
// a statement, too) it is gone, and another relay may hold it now.
bool StreamRelay::KeepLock() {
  if (db_.reconnects() == lock_session_) return true;
  Log("the database session was replaced: taking the stream's lock again");
  return TakeLock();
}

// Publishes every event of the batch and waits for every confirm. False
// when it gave up (stopped past the shutdown timeout: the batch stays
// unfinished and comes again); throws std::runtime_error for what must stop
// the relay (a returned message).
bool StreamRelay::Deliver(std::vector<Pending>& batch) {
  std::unordered_map<std::uint64_t, std::size_t> by_token;
  std::size_t acked = 0;
  std::vector<Confirm> confirms;
  while (acked < batch.size()) {
    if (stopping_ && Clock::now() >= stop_deadline_) return false;
    if (!broker_->connected()) {
      by_token.clear();
      for (Pending& p : batch) p.to_send = !p.acked;
      if (!ConnectBroker()) continue;
    }
    try {
      const auto now = Clock::now();
      for (std::size_t i = 0; i < batch.size() && broker_->accepting(); ++i) {
        Pending& p = batch[i];
        if (!p.to_send || now < p.publish_after) continue;
        if (p.token != 0) ++republished_;
        p.token = broker_->Publish(p.message);
        p.to_send = false;
        by_token[p.token] = i;
        ++published_;
        if (options_.verbose) Log("event " + p.event.id + ": published as " + p.message.message_id);
      }
      int timeout = kPollMillis;
      for (const Pending& p : batch) {
        if (!p.to_send) continue;
        const auto wait =
            std::chrono::duration_cast<std::chrono::milliseconds>(p.publish_after - Clock::now());
        timeout = std::clamp(static_cast<int>(wait.count()), 0, timeout);
      }
      pollfd fds[2] = {{signals_.read_fd(), POLLIN, 0}, {broker_->fd(), POLLIN, 0}};
      (void)poll(fds, fds[1].fd >= 0 ? 2 : 1, timeout);
      DrainSignals();
      confirms.clear();
      broker_->Poll(&confirms);
    } catch (const BrokerError& e) {
      Log("lost " + broker_->Describe() + ": " + e.what());
      next_broker_try_ = Clock::now() + broker_backoff_;
      continue;
    }
    for (const Confirm& confirm : confirms) {
      const auto found = by_token.find(confirm.token);
      if (found == by_token.end()) continue;
      Pending& p = batch[found->second];
      by_token.erase(found);
      if (p.acked) continue;
      switch (confirm.kind) {
        case Confirm::Kind::kAck:
          p.acked = true;
          ++acked;
          ++confirmed_;
          broker_backoff_ = std::chrono::milliseconds(100);
          if (options_.verbose) Log("event " + p.event.id + ": confirmed");
          break;
        case Confirm::Kind::kResend: {
          // "Not now" (a nack, no responders): again after a backoff of
          // its own, never in a tight loop.
          p.to_send = true;
          const auto pause = std::min(kFirstRetry * (1 << std::min(p.resends, 6)), kMaxBrokerRetry);
          ++p.resends;
          p.publish_after = Clock::now() + pause;
          if (confirm.reason != last_resend_reason_) {
            Log("event " + p.event.id + ": " + confirm.reason + "; publishing it again");
            last_resend_reason_ = confirm.reason;
          }
          break;
        }
        case Confirm::Kind::kRejected:
          throw std::runtime_error("event " + p.event.id + " of stream " + options_.stream + ": " +
                                   confirm.reason +
                                   "; the batch stays unfinished (fix the broker's bindings)");
      }
    }
  }
  return true;
}

bool StreamRelay::Finish(const std::string& batch_id, std::size_t events) {
  std::chrono::milliseconds backoff = kFirstRetry;
  for (;;) {
    try {
      (void)db_.Exec(kFinish, {batch_id.c_str()});
      ++batches_;
      events_ += events;
      return true;
    } catch (const DbError& e) {
      // Finished already: the same batch, finished by the connection that
      // broke before its answer came.
      if (e.sqlstate() == "55000") return true;
      if (!IsConnectionError(e.sqlstate(), e.severity())) throw;
      Log("pgq.finish_batch: " + e.Describe() + "; trying again");
      if (!SleepUnlessStopped(backoff) && Clock::now() >= stop_deadline_) return false;
      backoff = NextBackoff(backoff);
      (void)db_.Reset();
    }
  }
}

void StreamRelay::MaybeLogStats(bool force) {
  if (stats_interval_.count() == 0 && !force) return;
  if (!force && Clock::now() < next_stats_) return;
  next_stats_ = Clock::now() + stats_interval_;
  Log("stream " + options_.stream + ": " + std::to_string(batches_) + " batches, " +
      std::to_string(events_) + " events finished, " + std::to_string(published_) + " published (" +
      std::to_string(republished_) + " again), " + std::to_string(confirmed_) + " confirmed");
}

int StreamRelay::Run() {
  const std::string batch_size = std::to_string(options_.concurrency);
  const char* field =
      options_.routing_key_field.empty() ? nullptr : options_.routing_key_field.c_str();
  try {
    (void)db_.Exec(kRegister, {options_.stream.c_str(), options_.consumer.c_str()});
    if (!TakeLock()) return kExitOk;
  } catch (const DbError& e) {
    Log("error: stream " + options_.stream + ": " + e.Describe());
    return kExitError;
  }
  Log("relaying stream " + options_.stream + " as consumer " + options_.consumer);
  std::chrono::milliseconds db_backoff = kFirstRetry;
  for (;;) {
    DrainSignals();
    MaybeLogStats(false);
    if (stopping_) break;
    if (options_.max_jobs > 0 && events_ >= static_cast<std::uint64_t>(options_.max_jobs)) break;
    if (!ConnectBroker()) continue;
    try {
      if (!KeepLock()) break;
    } catch (const DbError& e) {
      Log("error: stream " + options_.stream + ": " + e.Describe());
      return kExitError;
    }
    Result rows;
    try {
      // The statement waits in the server; a stop signal cancels it.
      db_.Send(kNextBatch, {options_.stream.c_str(), options_.consumer.c_str(), batch_size.c_str(),
                            options_.wait.c_str(), field});
      while (!rows) {
        pollfd fds[2] = {{signals_.read_fd(), POLLIN, 0}, {db_.socket(), POLLIN, 0}};
        (void)poll(fds, 2, kPollMillis);
        if ((fds[0].revents & POLLIN) != 0) {
          DrainSignals();
          if (stopping_) db_.Cancel();
        }
        if ((fds[1].revents & (POLLIN | POLLHUP | POLLERR)) != 0) rows = db_.Consume();
      }
      db_backoff = kFirstRetry;
    } catch (const DbError& e) {
      if (e.sqlstate() == "57014" && stopping_) break;  // our cancel
      if (e.sqlstate() == "57014") {
        // Not ours: pg_cancel_backend, a statement_timeout, a lock wait
        // cancelled while ALTER EXTENSION waits. The next_batch rolled back
        // and opened nothing; the session (and its lock) is fine.
        Log("pgq.next_batch was cancelled (" + e.Describe() + "); asking again");
        SleepUnlessStopped(db_backoff);
        db_backoff = NextBackoff(db_backoff);
        continue;
      }
      if (!IsConnectionError(e.sqlstate(), e.severity())) {
        Log("error: pgq.next_batch: " + e.Describe());
        return kExitError;
      }
      Log("pgq.next_batch: lost the database connection (" + e.Describe() + "); reconnecting");
      SleepUnlessStopped(db_backoff);
      db_backoff = NextBackoff(db_backoff);
      (void)db_.Reset();  // the lock is taken again before the next read
      continue;
    }
    const int n = PQntuples(rows.get());
    if (n == 0) continue;
    const std::string batch_id = PQgetvalue(rows.get(), 0, 0);
    std::vector<Pending> batch(static_cast<std::size_t>(n));
    for (int row = 0; row < n; ++row) {
      ClaimedEvent& event = batch[static_cast<std::size_t>(row)].event;
      event.from_stream = true;
      event.queue = options_.stream;
      event.id = PQgetvalue(rows.get(), row, 1);
      event.body = PQgetvalue(rows.get(), row, 2);
      event.topic = Field(rows.get(), row, 3);
      event.group_key = Field(rows.get(), row, 4);
      event.event_id = Field(rows.get(), row, 5);
      event.enqueued_at = PQgetvalue(rows.get(), row, 6);
      event.routing_value = Field(rows.get(), row, 7);
      event.traceparent = Field(rows.get(), row, 8);
      event.tracestate = Field(rows.get(), row, 9);
      std::string why;
      std::optional<Message> message = MakeMessage(event, options_, &why);
      if (!message) {
        Log("error: event " + event.id + " of stream " + options_.stream +
            " cannot be sent: " + why + "; the batch stays unfinished");
        return kExitError;
      }
      batch[static_cast<std::size_t>(row)].message = std::move(*message);
    }
    try {
      if (!Deliver(batch)) break;
    } catch (const std::runtime_error& e) {
      Log(std::string("error: ") + e.what());
      return kExitError;
    }
    try {
      if (!Finish(batch_id, batch.size())) break;
    } catch (const DbError& e) {
      Log("error: pgq.finish_batch: " + e.Describe());
      return kExitError;
    }
  }
  MaybeLogStats(true);
  ReleaseLock();
  return kExitOk;
}

// On a clean exit: a standby need not wait for this session to end. Best
// effort: the end of the session frees the guard anyway.
void StreamRelay::ReleaseLock() {
  if (lock_session_ != db_.reconnects() || !db_.ok()) return;
  try {
    (void)db_.Exec(HasGuard() ? kRelease : kUnlock,
                   {options_.stream.c_str(), options_.consumer.c_str()});
  } catch (const DbError&) {
  }
}

}  // namespace pgq::cli
