// The pgq.* settings and the clock every lease and readiness check uses.
#pragma once

#include "pg/pg.h"

namespace pgq::pg {

// Defines the settings; called once from _PG_init.
void DefineSettings();

int64 MaxPayloadBytes();
int64 MaxLeaseMicros();
// pgq.max_consumers_per_stream: register_consumer refuses one more.
int MaxConsumersPerStream();
// pgq.monitoring_count_limit: the rows metrics(), queue_metrics() and
// stream_stats read for one count (a queue's state, exact up to it and
// estimated past it; a stream consumer's unfinished events, cut at it).
int64 MonitoringCountLimit();
// pgq.max_batch_bytes: a stream batch ends after the event that takes its
// payloads' stored size to this.
int64 MaxBatchBytes();
int MaintenanceIntervalMillis();
// pgq.wait_recheck: how long a waiting claim or next_batch sleeps, when
// nothing will wake it sooner, before it looks again (api/claim.cpp,
// api/stream_batches.cpp).
int WaitRecheckMillis();
// pgq.claim_rows_onto_rings: whether a claim of a ring queue takes its due
// rows onto the rings (service/claim.cpp; ADR 0028).
bool ClaimRowsOntoRings();
// pgq.ring_turn: how long a segment of a queue's ring is current at least.
int64 RingTurnMicros();
// The queues' rings in shared memory (pg/job_ring.h): lanes and leases, for
// the server (read once at its start) and a database's share of them.
int MaxRingQueues();
int MaxRingQueuesPerDatabase();
int MaxRunningRingJobs();
int MaxRunningRingJobsPerDatabase();
// Fair lanes (ADR 0029): how many rings at once may hand out their jobs in
// fair order (fairness => 'group'), and each one's room for active keys
// and filed offers (read once at the start).
int MaxFairQueues();
// A database's share of them (pgq.max_fair_queues_per_database).
int MaxFairQueuesPerDatabase();
int FairKeys();
int FairOffers();
int HandlerWorkers();
// pgq.compact_min_size in bytes; -1: never compact (service/compact.h).
int64 CompactMinBytes();
// pgq.databases as written: a comma-separated list, or "" for all.
const char* DatabasesSetting();

// Wall-clock time (not transaction start: a lease taken late in a long
// transaction must still last its full length), shifted by
// pgq.debug_clock_offset, which lets tests expire leases without sleeping.
TimestampTz Now();

// now + micros, or datetime_value_out_of_range instead of a silent overflow.
TimestampTz AddMicros(TimestampTz now, int64 micros, const char* what);

}  // namespace pgq::pg
