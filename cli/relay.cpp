#include "relay.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/prometheus.h"
#include "lease.h"
#include "program.h"
#include "retry.h"

namespace pgq::cli {

namespace {

// The claim, with pgq.publish's envelope ({"event_id", "topic", "payload",
// "group_key"}) unwrapped by the server, so the relay needs no JSON parser:
// id, attempt, queue, body, topic, group key, event id, enqueued_at (ISO 8601
// UTC and epoch), the --routing-key-field value of the body, how long the
// lease runs from now as the server sees it, and the job's trace context
// (pgq.claim_traced, 3.1: traceparent, tracestate, NULL when it has none).
// $1 queue, $2 n, $3 lease (NULL: the queue's), $4 wait, $5 the routing key
// field (NULL: none).
constexpr const char* kClaim =
    "SELECT c.id, c.attempt, c.queue, b.body::text,"
    "       CASE WHEN e.is_event THEN pg_catalog.jsonb_object_field_text(c.payload, 'topic') END,"
    "       CASE WHEN e.is_event THEN pg_catalog.jsonb_object_field_text(c.payload, 'group_key')"
    "       END,"
    "       CASE WHEN e.is_event THEN pg_catalog.jsonb_object_field_text(c.payload, 'event_id')"
    "       END,"
    "       pg_catalog.to_char(pg_catalog.timezone('UTC', c.enqueued_at),"
    "                          'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'),"
    "       pg_catalog.date_part('epoch', c.enqueued_at),"
    "       CASE WHEN pg_catalog.jsonb_typeof(b.body) OPERATOR(pg_catalog.=) 'object'"
    "            THEN pg_catalog.jsonb_object_field_text(b.body, $5::text) END,"
    "       pg_catalog.date_part('epoch', c.lease_until OPERATOR(pg_catalog.-) pgq.clock()),"
    "       c.traceparent, c.tracestate"
    "  FROM pgq.claim_traced($1::text, $2::integer, $3::interval, wait => $4::interval) AS c"
    " CROSS JOIN LATERAL (SELECT pg_catalog.jsonb_typeof(c.payload) OPERATOR(pg_catalog.=) "
    "                            'object'"
    "                        AND pg_catalog.jsonb_exists_all(c.payload,"
    "                                                        '{event_id,topic,payload}')"
    "                     AS is_event) AS e"
    " CROSS JOIN LATERAL (SELECT CASE WHEN e.is_event"
    "                            THEN pg_catalog.jsonb_object_field(c.payload, 'payload')"
    "                            ELSE c.payload END AS body) AS b";

// Every confirmed job of a round in one statement; the count completed.
constexpr const char* kCompleteMany = "SELECT pgq.complete_many($1::bigint[], $2::integer[])";
constexpr const char* kFail = "SELECT pgq.fail($1::bigint, $2::integer, $3::text)";
constexpr const char* kExtend = "SELECT pgq.extend($1::bigint, $2::integer, $3::interval)";
constexpr const char* kRelease = "SELECT pgq.release($1::bigint, $2::integer)";

// A cancel that reaches the server before the claim started is lost: sent
// again this often until the claim ends.
constexpr auto kCancelRepeat = std::chrono::milliseconds(500);
// Reconnecting to the broker: from 0.1 s, doubled, up to this.
constexpr std::chrono::milliseconds kMaxBrokerRetry{5000};
// The loop wakes at least this often: AMQP heartbeats, the confirm timeout.
constexpr int kMaxPollMillis = 1000;

// The commit-to-confirm histogram's upper bounds, in seconds.
constexpr double kLatencyBuckets[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                      0.25,  0.5,    1,     2.5,  5,     10};

// A PostgreSQL array literal of numbers ("{1,2,3}"): ids and attempts are
// the digits the server sent.
std::string ArrayLiteral(const std::vector<const std::string*>& values) {
  std::string text = "{";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0) text += ',';
    text += *values[i];
  }
  return text + "}";
}

double Percentile(std::vector<double>& values, double fraction) {
  if (values.empty()) return 0;
  const std::size_t index =
      std::min(values.size() - 1, static_cast<std::size_t>(fraction * values.size()));
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(index),
                   values.end());
  return values[index];
}

std::string Millis(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f ms", seconds * 1000);
  return text;
}

std::string JobName(const ClaimedEvent& event) {
  return "job " + event.id + " (attempt " + event.attempt + ")";
}

}  // namespace

Relay::Relay(RelaySettings settings, std::unique_ptr<Broker> broker, Connection claims,
             Connection completions, Connection control, SignalPipe& signals,
             std::optional<MetricsEndpoint> metrics)
    : settings_(std::move(settings)),
      options_(settings_.options),
      broker_(std::move(broker)),
      claims_(std::move(claims)),
      completions_(std::move(completions)),
      control_(std::move(control)),
      signals_(signals),
      metrics_(std::move(metrics)),
      claim_sql_(kClaim),
      broker_backoff_(kFirstRetry),
      claims_backoff_(kFirstRetry),
      settle_backoff_(kFirstRetry),
      latency_buckets_(std::size(kLatencyBuckets), 0) {
  next_stats_ = Clock::now() + settings_.stats_interval;
}

int Relay::Run() {
  for (;;) {
    ConnectBroker();
    PublishDue();
    ExtendDue();
    SendCompletions();
    SettleDue();
    if (stopping_) ShutdownStep();
    MaybeClaim();
    MaybeLogStats();
    if (Finished()) break;
    PollOnce();
  }
  broker_->Disconnect();
  return failed_ ? 1 : 0;
}

bool Relay::CanClaimMore() const {
  return !stopping_ && (options_.max_jobs == 0 || claimed_jobs_ < options_.max_jobs);
}

bool Relay::Finished() const {
  return !claim_in_flight_ && !completing_ && flights_.empty() && !CanClaimMore();
}

std::size_t Relay::CountIn(Flight::State state) const {
  return static_cast<std::size_t>(std::count_if(
      flights_.begin(), flights_.end(), [state](const Flight& f) { return f.state == state; }));
}

// ---------------------------------------------------------------- broker

void Relay::ConnectBroker() {
  if (broker_->connected() || Clock::now() < next_broker_try_) return;
  try {
    broker_->Connect();
  } catch (const BrokerError& e) {
    if (e.what() != last_broker_error_) Log(std::string(e.what()) + "; trying again");
    last_broker_error_ = e.what();
    next_broker_try_ = Clock::now() + Jitter(broker_backoff_);
    broker_backoff_ = std::min(2 * broker_backoff_, kMaxBrokerRetry);
    return;
  }
  ++counters_.broker_connects;
  const std::size_t again = flights_.size();
  Log("connected to " + broker_->Describe() +
      (counters_.broker_connects > 1
           ? " again; publishing " + std::to_string(again) + " unconfirmed message(s) again"
           : ""));
  last_broker_error_.clear();
  // The backoff starts again only once this connection has had an ack: a
  // broker that nacks everything (no queue leader yet) is not hammered.
}

// Whatever was published and not confirmed is in doubt: sent again (same
// message id) on the next connection.
void Relay::BrokerLost(const std::string& why) {
  Log("lost " + broker_->Describe() + ": " + why);
  broker_->Disconnect();
  by_token_.clear();
  for (Flight& flight : flights_) {
    if (flight.state == Flight::State::kPublished) {
      flight.state = Flight::State::kToPublish;
      flight.publish_after = Clock::now();
    }
  }
  next_broker_try_ = Clock::now() + Jitter(broker_backoff_);
  broker_backoff_ = std::min(2 * broker_backoff_, kMaxBrokerRetry);
}

void Relay::PublishDue() {
  if (!broker_->accepting()) return;
  const Clock::time_point now = Clock::now();
  for (auto it = flights_.begin(); it != flights_.end(); ++it) {
    Flight& flight = *it;
    if (flight.state != Flight::State::kToPublish || now < flight.publish_after) continue;
    // At most --concurrency messages wait for their confirms.
    if (by_token_.size() >= static_cast<std::size_t>(options_.concurrency)) return;
    try {
      flight.token = broker_->Publish(*flight.message);
    } catch (const BrokerError& e) {
      BrokerLost(e.what());
      return;
    }
    flight.state = Flight::State::kPublished;
    by_token_[flight.token] = it;
    ++counters_.published;
    if (flight.sends++ > 0 || flight.event.attempt != "1") ++counters_.republished;
    Verbose(JobName(flight.event) + ": published as " + flight.message->message_id + " to \"" +
            flight.message->routing_key + "\"");
    if (options_.park.point == DebugPark::Point::kAfterPublish &&
        counters_.published == static_cast<std::uint64_t>(options_.park.nth)) {
      Park("after-publish");
    }
  }
}

void Relay::PollBroker() {
  if (!broker_->connected()) return;
  std::vector<Confirm> confirms;
  std::optional<std::string> lost;
  try {
    broker_->Poll(&confirms);
  } catch (const BrokerError& e) {
    lost = e.what();
  }
  // The confirms read before a failure still count.
  for (const Confirm& confirm : confirms) OnConfirm(confirm);
  if (lost) BrokerLost(*lost);
}

void Relay::OnConfirm(const Confirm& confirm) {
  const auto found = by_token_.find(confirm.token);
  if (found == by_token_.end()) return;
  Flight& flight = *found->second;
  by_token_.erase(found);
  switch (confirm.kind) {
    case Confirm::Kind::kAck: {
      broker_backoff_ = kFirstRetry;
      flight.state = Flight::State::kConfirmed;
      ++counters_.confirmed;
      const double now =
          std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
              .count();
      const double latency = std::max(0.0, now - flight.enqueued_epoch);
      latencies_.push_back(latency);
      latency_sum_ += latency;
      ++latency_count_;
      for (std::size_t i = 0; i < std::size(kLatencyBuckets); ++i) {
        if (latency <= kLatencyBuckets[i]) ++latency_buckets_[i];
      }
      Verbose(JobName(flight.event) + ": confirmed");
      ++confirms_seen_;
      if (options_.park.point == DebugPark::Point::kAfterConfirm &&
          confirms_seen_ == static_cast<std::uint64_t>(options_.park.nth)) {
        Park("after-confirm");
      }
      break;
    }
    case Confirm::Kind::kRejected:
      flight.state = Flight::State::kRejected;
      flight.reason = "pgq-relay: " + confirm.reason;
      Log(JobName(flight.event) + ": " + confirm.reason + "; failing it");
      break;
    case Confirm::Kind::kResend:
      flight.state = Flight::State::kToPublish;
      flight.resend_backoff =
          flight.resend_backoff.count() == 0 ? kFirstRetry : NextBackoff(flight.resend_backoff);
      flight.publish_after = Clock::now() + Jitter(flight.resend_backoff);
      Log(JobName(flight.event) + ": " + confirm.reason + "; publishing it again");
      break;
  }
}

// ---------------------------------------------------------------- claims

// How many jobs a claim may take now: none while the broker is away (jobs
// wait in the queue, not here); else up to 3 x --concurrency held: N
// waiting for confirms, the next N claimed meanwhile, and N confirmed ones
// being completed, so neither the confirms nor the completion's commit
// stand between two claims (bench/relay.sh: 2N, which counted the jobs
// being completed against the next claim, forwarded 25 % less at N = 16).
// A crash gives at most 3N back to their leases.
long Relay::ClaimRoom() const {
  if (!CanClaimMore() || !broker_->connected()) return 0;
  long room = 3L * options_.concurrency - static_cast<long>(flights_.size());
  if (options_.max_jobs > 0) room = std::min(room, options_.max_jobs - claimed_jobs_);
  return room;
}

void Relay::MaybeClaim() {
  if (claim_in_flight_) return;
  if (Clock::now() < next_claim_) return;  // after a cancelled claim
  const long room = ClaimRoom();
  if (room <= 0) return;
  if (!claims_.ok()) {
    if (Clock::now() < next_claims_try_) return;
    if (!claims_.Reset()) {
      next_claims_try_ = Clock::now() + Jitter(claims_backoff_);
      claims_backoff_ = NextBackoff(claims_backoff_);
      return;
    }
    Log("connected to the database again");
    claims_backoff_ = kFirstRetry;
  }
  // Claims in batches: while a batch waits for its confirms, the next claim
  // waits for room for half a window (or for what --max-jobs leaves), not
  // for each slot a confirm frees: a claim per message would cost a commit
  // per message. With nothing held, whatever there is.
  long batch = std::max(1, options_.concurrency / 2);
  if (options_.max_jobs > 0) batch = std::min(batch, options_.max_jobs - claimed_jobs_);
  if (room < batch && !flights_.empty()) return;
  const std::string n = std::to_string(room);
  try {
    claims_.Send(
        claim_sql_.c_str(),
        {options_.queue.c_str(), n.c_str(),
         options_.lease.empty() ? nullptr : options_.lease.c_str(), options_.wait.c_str(),
         options_.routing_key_field.empty() ? nullptr : options_.routing_key_field.c_str()});
    claim_in_flight_ = true;
  } catch (const DbError& e) {
    Log("pgq.claim could not be sent: " + e.Describe());
    next_claims_try_ = Clock::now() + Jitter(claims_backoff_);
  }
}

void Relay::OnClaimReadable() {
  Result result;
  try {
    result = claims_.Consume();
    if (!result) return;  // more to come
  } catch (const DbError& e) {
    claim_in_flight_ = false;
    if (stopping_ && e.sqlstate() == "57014") return;  // our own cancel
    if (e.sqlstate() == "57014") {
      // Not ours: pg_cancel_backend, a statement_timeout, a lock wait
      // cancelled while ALTER EXTENSION waits. The claim rolled back and
      // took nothing; the session is fine: claim again after a pause.
      const std::chrono::milliseconds pause = Jitter(claims_backoff_);
      Log("pgq.claim was cancelled (" + e.Describe() + "); claiming again in " +
          std::to_string(pause.count()) + " ms");
      next_claim_ = Clock::now() + pause;
      claims_backoff_ = NextBackoff(claims_backoff_);
      return;
    }
    if (IsConnectionError(e.sqlstate(), e.severity())) {
      // The jobs of a claim whose answer was lost come back when their
      // leases end.
      Log("pgq.claim: lost the database connection (" + e.Describe() + "); reconnecting");
      next_claims_try_ = Clock::now() + Jitter(claims_backoff_);
      claims_backoff_ = NextBackoff(claims_backoff_);
      return;
    }
    Fatal("pgq.claim", e.Describe());
    return;
  }
  claim_in_flight_ = false;
  claims_backoff_ = kFirstRetry;
  const Clock::time_point now = Clock::now();
  for (int row = 0; row < PQntuples(result.get()); ++row) AddFlight(result.get(), row, now);
}

void Relay::AddFlight(const PGresult* rows, int row, Clock::time_point now) {
  const auto text = [&](int column) { return std::string(PQgetvalue(rows, row, column)); };
  const auto optional = [&](int column) -> std::optional<std::string> {
    if (PQgetisnull(rows, row, column)) return std::nullopt;
    return text(column);
  };
  Flight flight;
  flight.event.id = text(0);
  flight.event.attempt = text(1);
  flight.event.queue = text(2);
  flight.event.body = text(3);
  flight.event.topic = optional(4);
  flight.event.group_key = optional(5);
  flight.event.event_id = optional(6);
  flight.event.enqueued_at = text(7);
  flight.enqueued_epoch = std::strtod(PQgetvalue(rows, row, 8), nullptr);
  flight.event.routing_value = optional(9);
  flight.event.traceparent = optional(11);
  flight.event.tracestate = optional(12);
  const Lease lease = LeaseOf(options_.lease, settings_.lease_seconds, PQgetvalue(rows, row, 10));
  flight.lease = lease.text;
  flight.lease_length = lease.length;
  flight.half_lease = lease.half;
  flight.next_extend = now + flight.half_lease;
  flight.lease_end = now + flight.lease_length;
  flight.publish_after = now;
  std::string why;
  flight.message = MakeMessage(flight.event, options_, &why);
  if (!flight.message) {
    flight.state = Flight::State::kRejected;
    flight.reason = "pgq-relay: " + why;
    Log(JobName(flight.event) + ": cannot be sent: " + why + "; failing it");
  }
  ++claimed_jobs_;
  ++counters_.claimed;
  flights_.push_back(std::move(flight));
  if (stopping_) Release(std::prev(flights_.end()));  // the claim ended after a stop signal
}

// ---------------------------------------------------------------- leases

void Relay::ExtendDue() {
  const Clock::time_point now = Clock::now();
  for (auto it = flights_.begin(); it != flights_.end();) {
    Flight& flight = *it;
    // A job being completed needs no more lease (and its extend would find
    // it done).
    if (now < flight.next_extend || flight.state == Flight::State::kCompleting) {
      ++it;
      continue;
    }
    flight.next_extend = now + flight.half_lease;
    try {
      const Result result = control_.Exec(
          kExtend, {flight.event.id.c_str(), flight.event.attempt.c_str(), flight.lease.c_str()});
      if (!PQgetisnull(result.get(), 0, 0)) {
        flight.lease_end = now + flight.lease_length;  // renewed from when it was asked
        ++it;
        continue;
      }
      // Expired and claimed by another relay (or cancelled): not ours to
      // publish or finish any more.
      ++counters_.leases_lost;
      Log(JobName(flight.event) + ": its lease was lost (expired, or the job was cancelled)");
      it = Forget(it);
    } catch (const DbError& e) {
      if (!IsConnectionError(e.sqlstate(), e.severity())) {
        Fatal("pgq.extend of " + JobName(flight.event), e.Describe());
        return;
      }
      // Tried again soon, while the lease lasts.
      flight.next_extend = now + std::min<Clock::duration>(flight.half_lease / 2, kMaxRetry);
      DropExpired("the database is out of reach: " + e.Describe());
      return;
    }
  }
}

// Jobs whose lease ended while the server was out of reach are not ours any
// more: another relay may have claimed them. Their messages, confirmed or
// not, are published again by it (the at-least-once window).
void Relay::DropExpired(const std::string& why) {
  const Clock::time_point now = Clock::now();
  for (auto it = flights_.begin(); it != flights_.end();) {
    if (now < it->lease_end || it->state == Flight::State::kCompleting) {
      ++it;
      continue;
    }
    ++counters_.leases_lost;
    Log(JobName(it->event) + ": its lease ended before it could be " +
        (it->state == Flight::State::kConfirmed ? "completed" : "finished") + " (" + why +
        "); it will be published again");
    it = Forget(it);
  }
}

Relay::FlightList::iterator Relay::Forget(FlightList::iterator flight) {
  if (flight->state == Flight::State::kPublished) by_token_.erase(flight->token);
  return flights_.erase(flight);
}

// ---------------------------------------------------------------- outcomes

// Rejected jobs are failed one by one (they are rare); the backoff is
// shared with the completions: both wait for the same server.
void Relay::SettleDue() {
  if (Clock::now() < next_settle_try_) return;
  FailRejected();
}

// Every confirmed job not being completed yet, in one statement, sent
// without waiting: the loop goes on claiming and publishing meanwhile.
void Relay::SendCompletions() {
  if (completing_ || Clock::now() < next_settle_try_) return;
  std::vector<const std::string*> ids;
  std::vector<const std::string*> attempts;
  for (const Flight& flight : flights_) {
    if (flight.state != Flight::State::kConfirmed) continue;
    ids.push_back(&flight.event.id);
    attempts.push_back(&flight.event.attempt);
  }
  if (ids.empty()) return;
  if (!completions_.ok() && !completions_.Reset()) {
    CompletionsFailed(DbError("", "cannot connect to the database"));
    return;
  }
  const std::string id_array = ArrayLiteral(ids);
  const std::string attempt_array = ArrayLiteral(attempts);
  try {
    completions_.Send(kCompleteMany, {id_array.c_str(), attempt_array.c_str()});
  } catch (const DbError& e) {
    CompletionsFailed(e);
    return;
  }
  for (Flight& flight : flights_) {
    if (flight.state == Flight::State::kConfirmed) flight.state = Flight::State::kCompleting;
  }
  completing_ = true;
}

void Relay::OnCompletionsReadable() {
  Result result;
  try {
    result = completions_.Consume();
    if (!result) return;  // more to come
  } catch (const DbError& e) {
    completing_ = false;
    // Not known whether it committed: the jobs are completed again (a
    // repeat finds them done, and does not count them).
    for (Flight& flight : flights_) {
      if (flight.state == Flight::State::kCompleting) flight.state = Flight::State::kConfirmed;
    }
    CompletionsFailed(e);
    return;
  }
  completing_ = false;
  const long completed = std::strtol(PQgetvalue(result.get(), 0, 0), nullptr, 10);
  const std::size_t sent = CountIn(Flight::State::kCompleting);
  if (completed < static_cast<long>(sent)) {
    // A repeat after a connection loss finds the first try's work done, or
    // a lease ran out meanwhile: either way not ours to complete.
    Log(std::to_string(sent - static_cast<std::size_t>(completed)) + " of " + std::to_string(sent) +
        " confirmed job(s) were not completed: completed by an earlier try, or their leases "
        "were lost");
  }
  counters_.completed += static_cast<std::uint64_t>(completed);
  for (auto it = flights_.begin(); it != flights_.end();) {
    it = it->state == Flight::State::kCompleting ? flights_.erase(it) : std::next(it);
  }
  settle_backoff_ = kFirstRetry;
}

// A completion the server did not take: tried again with backoff, over a
// new connection, until the jobs' leases end (DropExpired).
void Relay::CompletionsFailed(const DbError& e) {
  if (!IsConnectionError(e.sqlstate(), e.severity())) {
    Fatal("pgq.complete_many", e.Describe());
    return;
  }
  const std::chrono::milliseconds pause = Jitter(settle_backoff_);
  Log("pgq.complete_many of " + std::to_string(CountIn(Flight::State::kConfirmed)) +
      " job(s) failed; retrying in " + std::to_string(pause.count()) + " ms: " + e.Describe());
  next_settle_try_ = Clock::now() + pause;
  settle_backoff_ = NextBackoff(settle_backoff_);
  DropExpired("the database is out of reach");
}

bool Relay::FailRejected() {
  for (auto it = flights_.begin(); it != flights_.end();) {
    if (it->state != Flight::State::kRejected) {
      ++it;
      continue;
    }
    try {
      const Result result = control_.Exec(
          kFail, {it->event.id.c_str(), it->event.attempt.c_str(), it->reason.c_str()});
      const std::string outcome =
          PQgetisnull(result.get(), 0, 0) ? "" : PQgetvalue(result.get(), 0, 0);
      if (!outcome.empty()) ++counters_.failed;
      Log(JobName(it->event) + ": failed" +
          (outcome == "dead"    ? ", attempts exhausted: dead-lettered"
           : outcome == "retry" ? ", will be retried"
                                : ", but its claim was lost to a newer one"));
    } catch (const DbError& e) {
      if (!IsConnectionError(e.sqlstate(), e.severity())) {
        Fatal("pgq.fail of " + JobName(it->event), e.Describe());
        return false;
      }
      next_settle_try_ = Clock::now() + Jitter(settle_backoff_);
      settle_backoff_ = NextBackoff(settle_backoff_);
      DropExpired("the database is out of reach");
      return false;
    }
    it = flights_.erase(it);
  }
  return true;
}

void Relay::Release(FlightList::iterator flight) {
  try {
    control_.Exec(kRelease, {flight->event.id.c_str(), flight->event.attempt.c_str()});
    ++counters_.released;
    Verbose(JobName(flight->event) + ": released");
  } catch (const DbError& e) {
    // Its lease ends by itself; the attempt then counts.
    Log("pgq.release of " + JobName(flight->event) + ": " + e.Describe());
  }
  Forget(flight);
}

// ---------------------------------------------------------------- stopping

// While stopping: jobs not published yet go back at once; published ones
// wait for their confirms until the deadline, then go back too (they may
// reach consumers twice: the at-least-once window of a shutdown).
void Relay::ShutdownStep() {
  const bool late = Clock::now() >= stop_deadline_;
  std::size_t released = 0;
  for (auto it = flights_.begin(); it != flights_.end();) {
    const auto next = std::next(it);
    if (it->state == Flight::State::kToPublish ||
        (late && it->state == Flight::State::kPublished)) {
      Release(it);
      ++released;
    }
    it = next;
  }
  if (late && released > 0) {
    Log("gave back " + std::to_string(released) + " job(s) whose confirm did not come in time");
  }
  if (claim_in_flight_ && Clock::now() >= next_cancel_) {
    claims_.Cancel();
    next_cancel_ = Clock::now() + kCancelRepeat;
  }
}

void Relay::Stop(const std::string& why) {
  if (stopping_) {
    stop_deadline_ = Clock::now();  // a second signal: no more waiting
    return;
  }
  stopping_ = true;
  stop_deadline_ = Clock::now() + settings_.shutdown_timeout;
  next_cancel_ = Clock::now();
  Log(why + ": claiming no more jobs; waiting for " + std::to_string(by_token_.size()) +
      " confirm(s)");
}

void Relay::Fatal(const std::string& what, const std::string& why) {
  Log("error: " + what + ": " + why);
  failed_ = true;
  Stop("stopping");
}

// ---------------------------------------------------------------- the loop

void Relay::PollOnce() {
  std::vector<pollfd> fds;
  fds.push_back({signals_.read_fd(), POLLIN, 0});
  const bool polls_claim = claim_in_flight_;
  const std::size_t claim_index = fds.size();
  if (polls_claim) fds.push_back({claims_.socket(), POLLIN, 0});
  const bool polls_completions = completing_;
  const std::size_t completions_index = fds.size();
  if (polls_completions) fds.push_back({completions_.socket(), POLLIN, 0});
  const int broker_fd = broker_->connected() ? broker_->fd() : -1;
  if (broker_fd >= 0) fds.push_back({broker_fd, POLLIN, 0});
  const std::size_t metrics_index = fds.size();
  if (metrics_) metrics_->AddPollFds(&fds);
  if (poll(fds.data(), fds.size(), PollTimeoutMillis()) < 0 && errno != EINTR) {
    Fatal("poll", std::strerror(errno));
    return;
  }
  if (fds[0].revents != 0) {
    for (const int signo : signals_.Drain()) {
      if (signo != SIGCHLD) Stop(SignalName(signo));
    }
  }
  if (polls_claim && fds[claim_index].revents != 0) OnClaimReadable();
  if (polls_completions && fds[completions_index].revents != 0) OnCompletionsReadable();
  // Also without input: the AMQP heartbeat and the confirm timeout.
  PollBroker();
  // Never blocks: a metrics client only moves when its socket is ready.
  if (metrics_) metrics_->Serve(&fds[metrics_index], [this] { return MetricsText(); });
}

// Until the next thing due; only what the loop would act on counts, or it
// would spin on a time already past (a message waiting for room in the
// confirm window, a claim with no room).
int Relay::PollTimeoutMillis() const {
  const Clock::time_point now = Clock::now();
  Clock::time_point next = now + std::chrono::milliseconds(kMaxPollMillis);
  const bool may_publish =
      broker_->accepting() && by_token_.size() < static_cast<std::size_t>(options_.concurrency);
  for (const Flight& flight : flights_) {
    if (flight.state == Flight::State::kCompleting) continue;
    next = std::min(next, flight.next_extend);
    if (flight.state == Flight::State::kToPublish && may_publish) {
      next = std::min(next, flight.publish_after);
    }
    if ((flight.state == Flight::State::kConfirmed && !completing_) ||
        flight.state == Flight::State::kRejected) {
      next = std::min(next, next_settle_try_);
    }
  }
  if (!broker_->connected()) next = std::min(next, next_broker_try_);
  if (!claims_.ok() && !claim_in_flight_ && ClaimRoom() > 0) {
    next = std::min(next, next_claims_try_);
  }
  if (stopping_ && stop_deadline_ > now) next = std::min(next, stop_deadline_);
  if (stopping_ && claim_in_flight_) next = std::min(next, next_cancel_);
  if (!claim_in_flight_ && next_claim_ > now && ClaimRoom() > 0) next = std::min(next, next_claim_);
  if (settings_.stats_interval.count() > 0) next = std::min(next, next_stats_);
  if (metrics_) {
    if (const auto deadline = metrics_->NextDeadline()) next = std::min(next, *deadline);
  }
  const auto wait = next - now;
  if (wait <= Clock::duration::zero()) return 0;
  return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(wait).count());
}

// ---------------------------------------------------------------- counters

void Relay::MaybeLogStats() {
  if (settings_.stats_interval.count() == 0) return;
  const Clock::time_point now = Clock::now();
  if (now < next_stats_ && !Finished()) return;
  next_stats_ = now + settings_.stats_interval;
  std::string line =
      "claimed " + std::to_string(counters_.claimed) + ", published " +
      std::to_string(counters_.published) + " (" + std::to_string(counters_.republished) +
      " again), confirmed " + std::to_string(counters_.confirmed) + ", completed " +
      std::to_string(counters_.completed) + ", failed " + std::to_string(counters_.failed) +
      ", released " + std::to_string(counters_.released) + ", in flight " +
      std::to_string(flights_.size());
  if (!latencies_.empty()) {
    line += "; commit to confirm p50 " + Millis(Percentile(latencies_, 0.5)) + ", p99 " +
            Millis(Percentile(latencies_, 0.99)) + " (" + std::to_string(latencies_.size()) +
            " confirms)";
  }
  latencies_.clear();
  Log(line);
}

std::string Relay::MetricsText() const {
  core::MetricsText text;
  const std::pair<std::string_view, std::string_view> queue{"queue", options_.queue};
  const auto counter = [&](const char* name, const char* help, std::uint64_t value) {
    text.Family(name, "counter", help);
    text.Sample(name, {queue}, static_cast<double>(value));
  };
  counter("pgq_relay_claimed_total", "Jobs claimed from the queue.", counters_.claimed);
  counter("pgq_relay_published_total", "Messages published (sent again ones included).",
          counters_.published);
  counter("pgq_relay_republished_total",
          "Messages published again: a later attempt, or after a lost broker connection.",
          counters_.republished);
  counter("pgq_relay_confirmed_total", "Messages the broker confirmed.", counters_.confirmed);
  counter("pgq_relay_completed_total", "Jobs completed after their confirm.", counters_.completed);
  counter("pgq_relay_failed_total", "Jobs failed: returned, refused, or not a valid message.",
          counters_.failed);
  counter("pgq_relay_released_total", "Jobs given back unpublished or unconfirmed (shutdown).",
          counters_.released);
  counter("pgq_relay_leases_lost_total", "Jobs whose lease was lost before they were finished.",
          counters_.leases_lost);
  counter("pgq_relay_broker_connects_total", "Connections made to the broker.",
          counters_.broker_connects);
  text.Family("pgq_relay_in_flight", "gauge", "Jobs claimed and not yet finished.");
  text.Sample("pgq_relay_in_flight", {queue}, static_cast<double>(flights_.size()));
  text.Family("pgq_relay_unconfirmed", "gauge", "Messages waiting for the broker's confirm.");
  text.Sample("pgq_relay_unconfirmed", {queue}, static_cast<double>(by_token_.size()));
  text.Family("pgq_relay_broker_up", "gauge", "1 while connected to the broker.");
  text.Sample("pgq_relay_broker_up", {queue}, broker_->connected() ? 1 : 0);
  const char* histogram = "pgq_relay_commit_to_confirm_seconds";
  text.Family(histogram, "histogram",
              "From the job's enqueue (the event's publish) to the broker's confirm.");
  for (std::size_t i = 0; i < std::size(kLatencyBuckets); ++i) {
    const std::string le = core::FormatSampleValue(kLatencyBuckets[i]);
    text.Sample("pgq_relay_commit_to_confirm_seconds_bucket", {queue, {"le", le}},
                static_cast<double>(latency_buckets_[i]));
  }
  text.Sample("pgq_relay_commit_to_confirm_seconds_bucket", {queue, {"le", "+Inf"}},
              static_cast<double>(latency_count_));
  text.Sample("pgq_relay_commit_to_confirm_seconds_sum", {queue}, latency_sum_);
  text.Sample("pgq_relay_commit_to_confirm_seconds_count", {queue},
              static_cast<double>(latency_count_));
  return text.text();
}

// ---------------------------------------------------------------- misc

void Relay::Park(const char* where) const {
  Log(std::string("parked ") + where);
  for (;;) pause();  // until SIGKILL: the tests' crash at this point
}

void Relay::Log(const std::string& line) const { LogLine("pgq-relay", line); }

void Relay::Verbose(const std::string& line) const {
  if (options_.verbose) Log(line);
}

std::chrono::milliseconds Relay::Jitter(std::chrono::milliseconds backoff) {
  return Jittered(backoff, std::uniform_real_distribution<double>(0, 1)(random_));
}

}  // namespace pgq::cli
