// What an operator watches: pgq.queue_metrics() (one row per queue, for
// postgres_exporter's custom queries), pgq.metrics() (the same and the
// workers, as Prometheus text), pgq.queue_counters() (the counters alone,
// which cost nothing to read) and pgq.worker_slots() (behind the
// pgq.workers view).
//
// They show every queue of the database, never a payload: EXECUTE on them
// is the right to see that, revoked from PUBLIC and granted to pg_monitor
// (docs/security.md). The counters are kept in shared memory (pg/ledger.h
// NoteCount), so they exist only when the library is preloaded, and count
// from the server's start, as Prometheus counters may.
#include <algorithm>
#include <string>
#include <vector>

#include "core/prometheus.h"
#include "pg/args.h"
#include "pg/queue_slots.h"
#include "pg/settings.h"
#include "pg/shared.h"
#include "pg/job_ring.h"
#include "pg/spi.h"
#include "store/jobs.h"
#include "store/queues.h"
#include "store/ring_jobs.h"
#include "store/streams.h"

extern "C" {
#include "commands/dbcommands.h"
#include "utils/array.h"
}

namespace pgq::api {

namespace {

constexpr const char* kStates[] = {"ready",   "scheduled", "running",
                                   "expired", "dead",      "awaiting_parents"};
constexpr int kStateCount = 6;

struct QueueMetrics {
  std::string name;
  int64 jobs[kStateCount];  // by kStates
  double oldest_ready_seconds;
  bool paused;
  bool has_counts;
  pg::QueueCounts counts;
  int32 max_running;  // 0: no cap
  bool estimated;     // some count past pgq.monitoring_count_limit, estimated
};

// Bounded per queue (2.0.1, M1): the dashboard's overview, each state
// counted through an index exactly up to pgq.monitoring_count_limit and
// estimated past it, so a producer that fills its queue does not make
// every team's scrape slow (a full count took 1.3 s per million jobs).
std::vector<QueueMetrics> ReadBoundedQueueMetrics(pg::SpiSession& spi) {
  const TimestampTz now = pg::Now();
  const Datum no_ids = pg::Guard([] { return PointerGetDatum(construct_empty_array(INT4OID)); });
  const std::vector<store::QueueOverview> read =
      store::ReadQueueOverview(spi, store::Scope{true, no_ids}, pg::MonitoringCountLimit(), now);
  std::vector<QueueMetrics> queues;
  queues.reserve(read.size());
  for (const store::QueueOverview& q : read) {
    const double oldest =
        q.oldest_ready
            ? static_cast<double>(std::max<int64>(0, now - *q.oldest_ready)) / USECS_PER_SEC
            : 0.0;
    QueueMetrics queue{q.name,
                       {q.ready, q.scheduled, q.running, q.expired, q.dead, q.awaiting_parents},
                       oldest,
                       q.paused,
                       false,
                       pg::QueueCounts{},
                       q.max_running.value_or(0),
                       q.estimated};
    queue.has_counts = pg::ReadCounts(q.queue_id, &queue.counts);
    queues.push_back(std::move(queue));
  }
  return queues;
}

std::vector<QueueMetrics> ReadQueueMetrics() {
  pg::SpiSession spi;
  return ReadBoundedQueueMetrics(spi);
}

struct WorkerSummary {
  int maintenance = 0;
  int handlers = 0;
  TimestampTz last_pass = 0;  // 0: none completed
};

// This database's background workers, from their shared slots.
WorkerSummary SummarizeWorkers() {
  WorkerSummary summary;
  pg::SharedState* shared = pg::Shared();
  if (shared == nullptr) return summary;
  pg::Guard([&] {
    LWLockAcquire(shared->lock, LW_SHARED);
    for (int i = 0; i < shared->worker_slot_count; ++i) {
      const pg::WorkerSlot& slot = shared->workers[i];
      if (slot.pid == 0 || slot.database != MyDatabaseId) continue;
      if (slot.kind == pg::WorkerKind::kMaintenance) {
        ++summary.maintenance;
        summary.last_pass = std::max(summary.last_pass, slot.last_pass);
      } else {
        ++summary.handlers;
      }
    }
    LWLockRelease(shared->lock);
  });
  return summary;
}

double UnixSeconds(TimestampTz t) {
  return static_cast<double>(t - SetEpochTimestamp()) / USECS_PER_SEC;
}

struct CounterFamily {
  pg::Counter counter;
  const char* name;
  const char* help;
};

constexpr CounterFamily kCounterFamilies[] = {
    {pg::kClaims, "pgq_claims_total", "Jobs claimed since the server started."},
    {pg::kCompletions, "pgq_completions_total", "Jobs completed since the server started."},
    {pg::kFailures, "pgq_failures_total",
     "Failed attempts reported with pgq.fail since the server started."},
    {pg::kLeaseExpiries, "pgq_lease_expiries_total",
     "Leases that ran out before their job was completed, since the server started."},
    {pg::kDeadLettered, "pgq_dead_lettered_total",
     "Jobs moved to pgq.dead_jobs (exhausted, expired or cancelled) since the server started."},
};

// The streams' families (2.0): every stream and consumer, as metrics()
// shows every queue (it is pg_monitor's).
// The ten busiest keys of each fair queue (ADR 0029): bounded by the fair
// queues in use (pgq.max_fair_queues) times ten.
void FairKeyMetrics(core::MetricsText& metrics, std::string_view database) {
  if (!pg::job_ring::Available()) return;
  pg::SpiSession spi;
  struct Row {
    std::string queue;
    pg::job_ring::FairKeyStat key;
  };
  std::vector<Row> rows;
  for (const store::QueueName& queue : store::FairQueueNames(spi)) {
    const char* text_name = pg::Guard([&] { return text_to_cstring(DatumGetTextPP(queue.name)); });
    const std::string name(text_name);
    for (pg::job_ring::FairKeyStat& key : store::ring::BusiestFairKeys(spi, queue.id, 10)) {
      rows.push_back(Row{name, std::move(key)});
    }
  }
  if (rows.empty()) return;
  const TimestampTz now = pg::Now();
  metrics.Family("pgq_fair_key_served", "gauge",
                 "Claims of a group key since it became active, for the ten busiest keys of each "
                 "queue with fairness.");
  for (const Row& row : rows) {
    metrics.Sample("pgq_fair_key_served",
                   {{"database", database}, {"queue", row.queue}, {"group_key", row.key.group_key}},
                   static_cast<double>(row.key.served));
  }
  metrics.Family("pgq_fair_key_wait_seconds", "gauge",
                 "How long the key's next job has been ready (its wait behind the other keys), for "
                 "the same keys.");
  for (const Row& row : rows) {
    metrics.Sample(
        "pgq_fair_key_wait_seconds",
        {{"database", database}, {"queue", row.queue}, {"group_key", row.key.group_key}},
        static_cast<double>(std::max<int64>(now - row.key.ready_since, 0)) / USECS_PER_SEC);
  }
}

// Queues with a max_pending (ADR 0029): the limit, the unfinished jobs it
// keeps (once counted after a start) and the enqueues it refused.
void MaxPendingMetrics(core::MetricsText& metrics, std::string_view database) {
  pg::SpiSession spi;
  const std::vector<std::pair<int32, std::string>> queues = store::QueuesWithMaxPending(spi);
  if (queues.empty()) return;
  metrics.Family("pgq_queue_unfinished", "gauge",
                 "Unfinished jobs (scheduled, waiting, ready, running) of a queue with a "
                 "max_pending, as kept for it; absent until counted after a start.");
  for (const auto& [queue_id, name] : queues) {
    pg::QueueSlot* slot = pg::FindQueueSlot(queue_id);
    if (slot == nullptr) continue;
    const core::PendingCount count = pg::ReadPendingCount(slot);
    if (count.state != core::PendingCount::kKnown) continue;
    metrics.Sample("pgq_queue_unfinished", {{"database", database}, {"queue", name}},
                   static_cast<double>(count.committed));
  }
  metrics.Family("pgq_max_pending_refusals_total", "counter",
                 "Enqueues, enqueue_many and publish calls refused by the queue's max_pending "
                 "since the server started.");
  for (const auto& [queue_id, name] : queues) {
    metrics.Sample("pgq_max_pending_refusals_total", {{"database", database}, {"queue", name}},
                   static_cast<double>(pg::Refusals(queue_id)));
  }
}

void StreamMetrics(core::MetricsText& text, std::string_view database) {
  pg::SpiSession spi;
  const std::vector<store::streams::StreamSize> sizes = store::streams::Sizes(spi);
  if (sizes.empty()) return;
  text.Family("pgq_stream_bytes", "gauge",
              "Bytes the stream's segment tables take (heap, indexes, TOAST).");
  for (const store::streams::StreamSize& s : sizes) {
    text.Sample("pgq_stream_bytes", {{"database", database}, {"stream", s.name}},
                static_cast<double>(s.bytes));
  }
  // Bounded per object (2.0.1, M1): at most pgq.max_consumers_per_stream
  // consumers a stream, each counted up to pgq.monitoring_count_limit; and
  // in all (3.0, ADR 0023): past 30 consumers, each is counted up to less.
  const int64 count_limit = pg::MonitoringCountLimit();
  const std::vector<store::streams::ConsumerStats> consumers =
      store::streams::Stats(spi, GetCurrentTimestamp(), count_limit, [](int32) { return true; });
  if (consumers.empty()) return;
  text.Family("pgq_stream_consumer_lag_seconds", "gauge",
              "Age of the consumer's oldest unfinished event; 0 when it has none.");
  for (const store::streams::ConsumerStats& c : consumers) {
    text.Sample("pgq_stream_consumer_lag_seconds",
                {{"database", database}, {"stream", c.stream}, {"consumer", c.consumer}},
                static_cast<double>(c.lag_us) / USECS_PER_SEC);
  }
  const std::string pending_help =
      "Events the consumer has not finished, counted up to " + std::to_string(count_limit) +
      " (pgq.monitoring_count_limit); past " + std::to_string(store::streams::kCountBudgetLimits) +
      " consumers, each up to that many times the limit divided by their number (at least " +
      std::to_string(store::streams::kMinConsumerCount) + ").";
  text.Family("pgq_stream_consumer_pending_events", "gauge", pending_help);
  for (const store::streams::ConsumerStats& c : consumers) {
    text.Sample("pgq_stream_consumer_pending_events",
                {{"database", database}, {"stream", c.stream}, {"consumer", c.consumer}},
                static_cast<double>(c.pending));
  }
  // A family of its own rather than a label on the count: a series keeps
  // its labels when the consumer crosses the limit, so alerts and graphs
  // on the count go on working.
  text.Family("pgq_stream_consumer_pending_events_capped", "gauge",
              "1 when the consumer has more unfinished events than were counted: "
              "pgq_stream_consumer_pending_events shows the limit, not the backlog.");
  for (const store::streams::ConsumerStats& c : consumers) {
    text.Sample("pgq_stream_consumer_pending_events_capped",
                {{"database", database}, {"stream", c.stream}, {"consumer", c.consumer}},
                c.pending_capped ? 1 : 0);
  }
  text.Family("pgq_stream_consumer_finished_events_total", "counter",
              "Events the consumer has finished since it was registered.");
  for (const store::streams::ConsumerStats& c : consumers) {
    text.Sample("pgq_stream_consumer_finished_events_total",
                {{"database", database}, {"stream", c.stream}, {"consumer", c.consumer}},
                static_cast<double>(c.finished_events));
  }
}

std::string MetricsText(const std::vector<QueueMetrics>& queues, const WorkerSummary& workers,
                        std::string_view database) {
  core::MetricsText text;
  text.Family("pgq_jobs", "gauge",
              "Jobs by state: ready (due now), scheduled (due later), running (leased), "
              "expired (running past the lease), dead (in pgq.dead_jobs), awaiting_parents "
              "(waiting for the jobs named in their after).");
  for (const QueueMetrics& q : queues) {
    for (int s = 0; s < kStateCount; ++s) {
      text.Sample("pgq_jobs", {{"database", database}, {"queue", q.name}, {"state", kStates[s]}},
                  static_cast<double>(q.jobs[s]));
    }
  }
  text.Family("pgq_oldest_ready_age_seconds", "gauge",
              "How long the oldest ready job has been due; 0 when none is.");
  for (const QueueMetrics& q : queues) {
    text.Sample("pgq_oldest_ready_age_seconds", {{"database", database}, {"queue", q.name}},
                q.oldest_ready_seconds);
  }
  const bool any_cap = std::any_of(queues.begin(), queues.end(),
                                   [](const QueueMetrics& q) { return q.max_running > 0; });
  if (any_cap) {
    text.Family("pgq_queue_max_running", "gauge",
                "The queue's max_running (jobs running at once), for queues that have one.");
  }
  for (const QueueMetrics& q : queues) {
    if (q.max_running > 0) {
      text.Sample("pgq_queue_max_running", {{"database", database}, {"queue", q.name}},
                  q.max_running);
    }
  }
  text.Family("pgq_queue_paused", "gauge", "1 while the queue is paused.");
  for (const QueueMetrics& q : queues) {
    text.Sample("pgq_queue_paused", {{"database", database}, {"queue", q.name}}, q.paused ? 1 : 0);
  }
  // A family of its own, as for stream consumers: pgq_jobs keeps its labels.
  text.Family("pgq_jobs_estimated", "gauge",
              "1 when some pgq_jobs count of the queue passed pgq.monitoring_count_limit and is "
              "estimated from the planner's statistics.");
  for (const QueueMetrics& q : queues) {
    text.Sample("pgq_jobs_estimated", {{"database", database}, {"queue", q.name}},
                q.estimated ? 1 : 0);
  }
  // Counted in shared memory: without preload there is nothing to show.
  if (pg::Shared() != nullptr) {
    for (const CounterFamily& family : kCounterFamilies) {
      text.Family(family.name, "counter", family.help);
      for (const QueueMetrics& q : queues) {
        text.Sample(family.name, {{"database", database}, {"queue", q.name}},
                    static_cast<double>(q.counts.values[family.counter]));
      }
    }
    text.Family("pgq_workers", "gauge", "pgq background workers running for this database.");
    text.Sample("pgq_workers", {{"database", database}, {"kind", "maintenance"}},
                workers.maintenance);
    text.Sample("pgq_workers", {{"database", database}, {"kind", "handler"}}, workers.handlers);
    if (workers.last_pass != 0) {
      text.Family("pgq_maintenance_last_pass_timestamp_seconds", "gauge",
                  "When the maintenance worker of this database last completed a pass "
                  "(Unix time).");
      text.Sample("pgq_maintenance_last_pass_timestamp_seconds", {{"database", database}},
                  UnixSeconds(workers.last_pass));
    }
  }
  FairKeyMetrics(text, database);
  MaxPendingMetrics(text, database);
  StreamMetrics(text, database);
  return text.text();
}

}  // namespace

}  // namespace pgq::api

using namespace pgq;

// queue_metrics() returns SETOF (queue, ready, scheduled, running, expired,
// dead, oldest_ready_seconds, paused, claims, completions, failures,
// lease_expiries, dead_lettered, max_running, awaiting_parents, estimated)
PGQ_FUNCTION(pgq_queue_metrics) {
  ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
  pg::Guard([&] { InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC); });
  const std::vector<api::QueueMetrics> queues = api::ReadQueueMetrics();
  constexpr int kColumns = 16;
  for (const api::QueueMetrics& q : queues) {
    Datum values[kColumns];
    bool nulls[kColumns] = {};
    values[15] = BoolGetDatum(q.estimated);
    values[13] = Int32GetDatum(q.max_running);
    nulls[13] = q.max_running == 0;
    values[14] = Int64GetDatum(q.jobs[5]);
    values[0] = pg::TextDatum(q.name);
    for (int s = 0; s < 5; ++s) values[1 + s] = Int64GetDatum(q.jobs[s]);
    values[6] = Float8GetDatum(q.oldest_ready_seconds);
    values[7] = BoolGetDatum(q.paused);
    // Counted in shared memory: NULL without preload; 0 for a queue nothing
    // happened to since the server started (it has no slot yet).
    for (int c = 0; c < pg::kCounterKinds; ++c) {
      values[8 + c] = Int64GetDatum(q.has_counts ? static_cast<int64>(q.counts.values[c]) : 0);
      nulls[8 + c] = pg::Shared() == nullptr;
    }
    pg::Guard([&] { tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls); });
  }
  return static_cast<Datum>(0);
}

// queue_counters() returns SETOF (queue, claims, completions, failures,
// lease_expiries, dead_lettered): the counters of queue_metrics() without
// its gauges, which count every job (a dashboard's rates, sampled every few
// seconds). No row without preload.
PGQ_FUNCTION(pgq_queue_counters) {
  ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
  pg::Guard([&] { InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC); });
  if (pg::Shared() == nullptr) return static_cast<Datum>(0);
  pg::SpiSession spi;
  const std::vector<store::QueueName> queues = store::QueueNames(spi);
  constexpr int kColumns = 1 + pg::kCounterKinds;
  for (const store::QueueName& queue : queues) {
    pg::QueueCounts counts{};
    const bool counted = pg::ReadCounts(queue.id, &counts);
    Datum values[kColumns];
    bool nulls[kColumns] = {};
    values[0] = queue.name;
    for (int c = 0; c < pg::kCounterKinds; ++c) {
      values[1 + c] = Int64GetDatum(counted ? static_cast<int64>(counts.values[c]) : 0);
    }
    pg::Guard([&] { tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls); });
  }
  return static_cast<Datum>(0);
}

// metrics() returns text
PGQ_FUNCTION(pgq_metrics) {
  const std::vector<api::QueueMetrics> queues = api::ReadQueueMetrics();
  const api::WorkerSummary workers = api::SummarizeWorkers();
  const char* database = pg::Guard([] { return get_database_name(MyDatabaseId); });
  return pg::TextDatum(api::MetricsText(queues, workers, database != nullptr ? database : ""));
}

// worker_slots() returns SETOF (pid, kind, database, last_pass): the pgq
// background workers running, in every database (none without preload).
PGQ_FUNCTION(pgq_worker_slots) {
  ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
  pg::Guard([&] { InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC); });
  pg::SharedState* shared = pg::Shared();
  if (shared == nullptr) return static_cast<Datum>(0);
  // Copied under the lock (into room reserved before), returned after it.
  std::vector<pg::WorkerSlot> running;
  running.reserve(shared->worker_slot_count);
  pg::Guard([&] {
    LWLockAcquire(shared->lock, LW_SHARED);
    for (int i = 0; i < shared->worker_slot_count; ++i) {
      if (shared->workers[i].pid != 0) running.push_back(shared->workers[i]);
    }
    LWLockRelease(shared->lock);
  });
  for (const pg::WorkerSlot& slot : running) {
    Datum values[4] = {
        Int32GetDatum(slot.pid),
        pg::TextDatum(slot.kind == pg::WorkerKind::kMaintenance ? "maintenance" : "handler"),
        ObjectIdGetDatum(slot.database), TimestampTzGetDatum(slot.last_pass)};
    bool nulls[4] = {false, false, false, slot.last_pass == 0};
    pg::Guard([&] { tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls); });
  }
  return static_cast<Datum>(0);
}
