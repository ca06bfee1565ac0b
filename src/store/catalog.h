// Where pgq's tables are in this database: the oids and attribute numbers
// the store builds rows and scans with. Which version of them is installed
// is asked at one door only (pg/catalog_version.h, ADR 0024): every caller
// here runs on a catalog of the library's own version.
#pragma once

#include "pg/pg.h"

namespace pgq::store {

// Where each column a new job is given sits in pgq.job_rows (attribute numbers,
// 1-based), for inserts that build the row themselves (store/insert.cpp).
struct JobColumns {
  int natts;
  AttrNumber id, queue_id, state, priority, run_at, attempt, max_attempts, enqueued_at, payload;
  AttrNumber last_error, has_dependents, claimed_at, claimed_by, lease_until, group_key;
  AttrNumber dedupe_key, dedupe_for, progress, trace_context;
};

struct Catalog {
  Oid jobs;           // pgq.job_rows, InvalidOid while not installed
  Oid job_id_seq;     // pgq.job_id_seq
  Oid claim_seq;      // pgq.claim_seq (3.0): the numbers of entries claimed as written
  Oid running_index;  // jobs_lease_idx: (queue_id, lease_until) of running jobs
  Oid ready_index;    // jobs_ready_idx: (queue_id, - priority, run_at, id) of pending jobs
  Oid dead_jobs;      // pgq.dead_jobs (partitioned since 1.2)
  JobColumns job_columns;
};

// Probed again after any relcache invalidation (an update sends them).
const Catalog& InstalledCatalog();

}  // namespace pgq::store
