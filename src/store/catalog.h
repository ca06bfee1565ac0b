// Which version of pgq's tables is installed in this database: the one
// probe every choice between statement sets asks. A backend can run with a
// newer library than its database's catalog (before ALTER EXTENSION pgq_cpp
// UPDATE), and the update can happen in the middle of a session.
#pragma once

#include "pg/pg.h"

namespace pgq::store {

// Where each column a new job is given sits in pgq.jobs (attribute numbers,
// 1-based), for inserts that build the row themselves (store/insert.cpp).
struct JobColumns {
  int natts;
  AttrNumber id, queue_id, state, priority, run_at, attempt, max_attempts, enqueued_at, payload;
};

struct Catalog {
  bool claimer_columns;    // 1.1: pgq.jobs.claimed_by and claimed_at
  bool grants;             // 1.1: pgq.grants
  bool topics;             // 1.2: pgq.topics and pgq.topic_grants
  bool lifecycle;          // 1.2: history, progress, dedupe periods (issue 17)
  bool caps;               // 1.2: max_running and group_concurrency (issue 18)
  bool dependencies;       // 1.2: pgq.job_dependencies (enqueue's after, issue 18)
  bool streams;            // 2.0: pgq.streams (issue 21)
  bool retention_classes;  // 2.0.1: a ring per retention class (ADR 0021)
  bool releases;           // 2.0.1: pgq.dependency_releases (issue 30, D4)
  Oid jobs;                // pgq.jobs, InvalidOid while not installed
  Oid job_id_seq;          // pgq.job_id_seq
  Oid running_index;       // with caps: jobs_lease_idx, (queue_id, lease_until) of running jobs
  Oid ready_index;         // jobs_ready_idx: (queue_id, - priority, run_at, id) of pending jobs
  Oid dead_jobs;           // pgq.dead_jobs (partitioned since 1.2)
  JobColumns job_columns;
};

// Probed again after any relcache invalidation (an update sends them).
const Catalog& InstalledCatalog();

}  // namespace pgq::store
