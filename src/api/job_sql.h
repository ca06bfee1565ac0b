// SQL fragments shared by the statements that move jobs out of pgq.jobs.
// Each follows a CTE named `d` that holds the deleted pgq.jobs rows.
#pragma once

// Into dead-letter, the job kept whole. The queue name comes from a scalar
// subquery into a NOT NULL column: if the queue were somehow gone, the
// statement fails instead of losing the job.
#define PGQ_BURY_DELETED(last_error, reason, died_at)                                       \
  "INSERT INTO pgq.dead_jobs (id, queue, payload, attempts, last_error, reason, died_at, "  \
  "                           priority, max_attempts, enqueued_at, dedupe_key, group_key) " \
  "SELECT d.id, (SELECT name FROM pgq.queues q WHERE q.queue_id = d.queue_id), d.payload, " \
  "       d.attempt, " last_error ", '" reason "', " died_at                                \
  ", d.priority, "                                                                          \
  "       d.max_attempts, d.enqueued_at, d.dedupe_key, d.group_key FROM d"

// Into the log of finished jobs kept for the queue's retention.
#define PGQ_RECORD_FINISHED(finished_at)                                          \
  "INSERT INTO pgq.done_jobs (id, queue_id, attempts, enqueued_at, finished_at) " \
  "SELECT d.id, d.queue_id, d.attempt, d.enqueued_at, " finished_at " FROM d"
