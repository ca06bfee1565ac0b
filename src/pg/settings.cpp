#include "pg/settings.h"

#include "pg/boundary.h"
#include "pg/trace_context.h"

extern "C" {
#include "common/int.h"
#include "miscadmin.h"
#include "utils/guc.h"
}

namespace pgq::pg {

namespace {

// GUC variables must be plain globals that PostgreSQL writes into.
int max_payload_bytes = 1024 * 1024;
int max_lease_seconds = 24 * 60 * 60;
int debug_clock_offset_seconds = 0;
int maintenance_interval_ms = 1000;
int wait_recheck_ms = 1000;
int ring_turn_ms = 60 * 1000;
int max_ring_queues = 128;
int max_ring_queues_per_database = 64;
int max_running_ring_jobs = 65536;
int max_running_ring_jobs_per_database = 32768;
int max_fair_queues = 4;
int max_fair_queues_per_database = 2;
int fair_keys = 16384;
int fair_offers = 65536;
int handler_workers = 2;
char* databases = nullptr;
int compact_min_size_kb = 2048;
int max_consumers_per_stream = 100;
int monitoring_count_limit = 1000;
int max_batch_bytes = 64 * 1024 * 1024;
bool claim_rows_onto_rings = true;

}  // namespace

void DefineSettings() {
  DefineCustomIntVariable(
      "pgq.max_payload_bytes", "Largest job payload accepted by pgq.enqueue, in bytes.",
      "Larger payloads are refused with program_limit_exceeded. Keep payloads small and store "
      "large documents in your own tables.",
      &max_payload_bytes, 1024 * 1024, 1, MaxAllocSize, PGC_SUSET, GUC_UNIT_BYTE, nullptr, nullptr,
      nullptr);
  DefineCustomIntVariable("pgq.max_lease", "Longest lease a claim or extend may take.", nullptr,
                          &max_lease_seconds, 24 * 60 * 60, 1, INT_MAX / 2, PGC_SUSET, GUC_UNIT_S,
                          nullptr, nullptr, nullptr);
  DefineCustomIntVariable(
      "pgq.debug_clock_offset", "Shifts pgq's clock, for tests only.",
      "Added to the wall clock for every lease, readiness and retention decision.",
      &debug_clock_offset_seconds, 0, -INT_MAX / 2, INT_MAX / 2, PGC_SUSET,
      GUC_UNIT_S | GUC_NOT_IN_SAMPLE, nullptr, nullptr, nullptr);
  DefineCustomIntVariable(
      "pgq.maintenance_interval", "Time between two maintenance passes of the background worker.",
      "Each pass returns expired leases and drops finished-job counts past retention.",
      &maintenance_interval_ms, 1000, 10, 60 * 60 * 1000, PGC_SIGHUP, GUC_UNIT_MS, nullptr, nullptr,
      nullptr);
  // User-settable: it sets how often the session's own waits look again,
  // which a client can do anyway by calling claim or next_batch in a loop;
  // it is no limit that protects other sessions.
  DefineCustomIntVariable(
      "pgq.wait_recheck",
      "Longest sleep of a waiting pgq.claim or pgq.next_batch before it looks again.",
      "A waiting call is woken by the commit that gives it work, and a claim also when a job "
      "that was not due yet becomes due or its rate limit has a token again. It looks again at "
      "least this often for what wakes nobody: a queue's caps raised by alter_queue, a queue "
      "or stream dropped, or dropped and created again, a COMMIT PREPARED.",
      &wait_recheck_ms, 1000, 10, 60 * 60 * 1000, PGC_USERSET, GUC_UNIT_MS, nullptr, nullptr,
      nullptr);
  DefineCustomIntVariable(
      "pgq.ring_turn",
      "How long a segment of a queue's ring takes new jobs before the next one does.",
      "The maintenance turns a queue's ring onto its next segment when the current one has taken "
      "jobs this long and the next one is empty, and truncates a segment once every job in it has "
      "finished. Shorter: smaller segments, reclaimed sooner; a job that runs longer than three "
      "turns holds its segment, and the current one grows meanwhile.",
      &ring_turn_ms, 60 * 1000, 10, 24 * 60 * 60 * 1000, PGC_SUSET, GUC_UNIT_MS, nullptr, nullptr,
      nullptr);
  // Sizes of shared memory: only a library the postmaster preloads may
  // define them (a backend that loads it later, on CREATE EXTENSION without
  // preload, would fail: it has no rings anyway, pg/job_ring.h).
  if (process_shared_preload_libraries_in_progress) {
    DefineCustomIntVariable(
        "pgq.max_ring_queues", "Queues in use at once, in the whole server.",
        "A queue in use (running jobs, or a transaction using it) holds a lane in shared memory "
        "(about 70 kB), built from its ring when it is first used; an idle queue's lane is taken "
        "back. A queue that finds none works from pgq.job_rows meanwhile (its enqueues put their "
        "jobs there, its claims take from there).",
        &max_ring_queues, 128, 1, 1024, PGC_POSTMASTER, 0, nullptr, nullptr, nullptr);
    DefineCustomIntVariable(
        "pgq.max_running_ring_jobs",
        "Jobs of queues on rings that run at once, in the whole server.",
        "Each running job's lease takes an entry of a map in shared memory (about 100 B); the "
        "jobs a claim takes past it run as rows of pgq.job_rows.",
        &max_running_ring_jobs, 65536, 64, 16 * 1024 * 1024, PGC_POSTMASTER, 0, nullptr, nullptr,
        nullptr);
    DefineCustomIntVariable(
        "pgq.max_fair_queues", "Queues with fairness that hand out jobs at once, in the server.",
        "A queue with fairness => 'group' in use holds a fair order in shared memory (its size "
        "set by pgq.fair_keys and pgq.fair_offers, about 3.9 MB at the defaults) beside its lane; "
        "one that finds none hands out its jobs in the order they came until one is free (logged).",
        &max_fair_queues, 4, 0, 1024, PGC_POSTMASTER, 0, nullptr, nullptr, nullptr);
    DefineCustomIntVariable(
        "pgq.fair_keys", "Group keys with ready jobs a fair queue serves at once.",
        "Each takes about 80 B of a fair order; a job of one more key waits until a key's jobs "
        "are all handed out.",
        &fair_keys, 16384, 16, 1024 * 1024, PGC_POSTMASTER, 0, nullptr, nullptr, nullptr);
    DefineCustomIntVariable(
        "pgq.fair_offers", "Ready jobs a fair queue keeps sorted by key at once.",
        "Each takes 16 B of a fair order; a key's later jobs are read again from its ring when its "
        "earlier ones are handed out.",
        &fair_offers, 65536, 64, 16 * 1024 * 1024, PGC_POSTMASTER, 0, nullptr, nullptr, nullptr);
  }
  DefineCustomIntVariable(
      "pgq.max_ring_queues_per_database", "Queues in use at once in one database.",
      "A database's share of pgq.max_ring_queues, so that one cannot take every lane.",
      &max_ring_queues_per_database, 64, 1, 1024, PGC_SUSET, 0, nullptr, nullptr, nullptr);
  DefineCustomIntVariable(
      "pgq.max_fair_queues_per_database", "Fair queues handing out jobs at once in one database.",
      "A database's share of pgq.max_fair_queues, so that one database's fair queues cannot take "
      "every fair order and leave another's queues unfair.",
      &max_fair_queues_per_database, 2, 0, 1024, PGC_SUSET, 0, nullptr, nullptr, nullptr);
  DefineCustomIntVariable(
      "pgq.max_running_ring_jobs_per_database",
      "Jobs of queues on rings that run at once in one database.",
      "A database's share of pgq.max_running_ring_jobs: the jobs a claim takes past what is left "
      "of it run as rows of pgq.job_rows.",
      &max_running_ring_jobs_per_database, 32768, 1, 16 * 1024 * 1024, PGC_SUSET, 0, nullptr,
      nullptr, nullptr);
  DefineCustomIntVariable(
      "pgq.handler_workers", "Background workers per database that run in-database handlers.",
      "Started while some queue of the database has a handler; 0 runs no handler.",
      &handler_workers, 2, 0, 64, PGC_SIGHUP, 0, nullptr, nullptr, nullptr);
  DefineCustomIntVariable(
      "pgq.compact_min_size", "Size of pgq.job_rows from which it is compacted.",
      "When the table and its indexes are at least this large and the live jobs fill at most an "
      "eighth of it, the maintenance pass rewrites it with only the live jobs. -1 never does.",
      &compact_min_size_kb, 2048, -1, INT_MAX, PGC_SUSET, GUC_UNIT_KB, nullptr, nullptr, nullptr);
  DefineCustomIntVariable(
      "pgq.max_consumers_per_stream", "Most consumers one stream may have.",
      "pgq.register_consumer refuses one more with program_limit_exceeded. Every consumer holds "
      "the stream's segments and is counted by every scrape of pgq.metrics().",
      &max_consumers_per_stream, 100, 1, 100000, PGC_SUSET, 0, nullptr, nullptr, nullptr);
  DefineCustomIntVariable(
      "pgq.monitoring_count_limit",
      "Most rows pgq.metrics(), queue_metrics() and stream_stats read for one count.",
      "Each state of a queue is counted exactly up to it and estimated past it; a stream "
      "consumer's unfinished events are counted up to it. Either is marked when cut, so one "
      "queue's or stream's backlog cannot make monitoring slow for everyone.",
      &monitoring_count_limit, 1000, 1, 1000000, PGC_SUSET, 0, nullptr, nullptr, nullptr);
  DefineCustomIntVariable(
      "pgq.max_batch_bytes", "Size of a stream batch's payloads past which next_batch ends it.",
      "A batch ends after the event that takes its payloads (as stored) to this size, so one "
      "next_batch holds at most about this much; it always has at least one event.",
      &max_batch_bytes, 64 * 1024 * 1024, 1, INT_MAX, PGC_SUSET, GUC_UNIT_BYTE, nullptr, nullptr,
      nullptr);
  DefineCustomBoolVariable(
      "pgq.claim_rows_onto_rings", "Whether a claim takes due rows of pgq.job_rows onto rings.",
      "On: a retry or scheduled job claimed by a queue on rings runs as an entry of its ring "
      "(ADR 0028, \"Rows claimed onto the rings\"); off: it is claimed in place and runs as a "
      "row, as in 2.x.",
      &claim_rows_onto_rings, true, PGC_SUSET, 0, nullptr, nullptr, nullptr);
  DefineCustomStringVariable(
      "pgq.databases", "Databases where the background workers run.",
      "A comma-separated list of database names. Empty: every database with pgq_cpp installed.",
      &databases, "", PGC_SIGHUP, GUC_LIST_INPUT, nullptr, nullptr, nullptr);
  DefineTraceContextSetting();
  MarkGUCPrefixReserved("pgq");
}

int MaintenanceIntervalMillis() { return maintenance_interval_ms; }

int WaitRecheckMillis() { return wait_recheck_ms; }

bool ClaimRowsOntoRings() { return claim_rows_onto_rings; }

int64 RingTurnMicros() { return static_cast<int64>(ring_turn_ms) * 1000; }

int MaxRingQueues() { return max_ring_queues; }
int MaxRingQueuesPerDatabase() { return max_ring_queues_per_database; }
int MaxRunningRingJobs() { return max_running_ring_jobs; }
int MaxRunningRingJobsPerDatabase() { return max_running_ring_jobs_per_database; }
int MaxFairQueues() { return max_fair_queues; }
int MaxFairQueuesPerDatabase() { return max_fair_queues_per_database; }
int FairKeys() { return fair_keys; }
int FairOffers() { return fair_offers; }

int HandlerWorkers() { return handler_workers; }

int64 CompactMinBytes() {
  return compact_min_size_kb < 0 ? -1 : static_cast<int64>(compact_min_size_kb) * 1024;
}

const char* DatabasesSetting() { return databases != nullptr ? databases : ""; }

int MaxConsumersPerStream() { return max_consumers_per_stream; }

int64 MonitoringCountLimit() { return monitoring_count_limit; }

int64 MaxBatchBytes() { return max_batch_bytes; }

int64 MaxPayloadBytes() { return max_payload_bytes; }

int64 MaxLeaseMicros() { return static_cast<int64>(max_lease_seconds) * USECS_PER_SEC; }

TimestampTz Now() {
  return GetCurrentTimestamp() + static_cast<int64>(debug_clock_offset_seconds) * USECS_PER_SEC;
}

TimestampTz AddMicros(TimestampTz now, int64 micros, const char* what) {
  TimestampTz result = 0;
  if (pg_add_s64_overflow(now, micros, &result) || !IS_VALID_TIMESTAMP(result)) {
    Raise(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE, std::string(what) + " is out of range");
  }
  return result;
}

}  // namespace pgq::pg
