// Compaction of pgq.job_rows (ADR 0008): when and how much (the maintenance
// pass and pgq.compact_jobs()); the rewrite itself is pg::RewriteTableFrozen (pg/table_rewrite.h).
//
// VACUUM cannot remove a row version that some open transaction might still
// see, so a transaction held open for minutes leaves every job processed
// meanwhile in the table and its indexes. The queue's live set is small
// (pending, running and waiting jobs), so instead of waiting for VACUUM we
// rewrite the table to its live rows.
#include "service/compact.h"

#include "pg/settings.h"
#include "pg/spi.h"
#include "pg/table_rewrite.h"
#include "store/jobs.h"

extern "C" {
#include "catalog/namespace.h"
#include "utils/acl.h"
#include "utils/lsyscache.h"
}

namespace pgq::service {

namespace {

// A generous size of one live job with its index entries, and how much of
// the table the live jobs may fill for a rewrite to be worth its lock.
constexpr int64 kLiveJobBytes = 1024;
constexpr int64 kWorthRatio = 8;

// An automatic rewrite waits at most this long for its lock (every claim
// and enqueue queues behind a waiting ACCESS EXCLUSIVE request) and keeps
// its lock for milliseconds: a few thousand live jobs at most.
constexpr int kAutoLockTimeoutMillis = 20;
constexpr int64 kAutoMaxJobs = 10000;
constexpr int64 kAutoMaxBytes = 64 * 1024 * 1024;

Oid JobsRelid() {
  return pg::Guard([] {
    const Oid relid = get_relname_relid("job_rows", get_namespace_oid("pgq", false));
    if (!OidIsValid(relid)) elog(ERROR, "pgq.job_rows does not exist");
    return relid;
  });
}

int64 JobsBytes(pg::SpiSession& spi, Oid relid, int64* live) {
  const store::TableSize size = store::JobsTableSize(spi, relid);
  if (live != nullptr) *live = size.live_rows;
  return size.bytes;
}

}  // namespace

bool MayCompactJobs() {
  const Oid relid = JobsRelid();
  return pg::Guard([&] { return pg_class_ownercheck(relid, GetUserId()); });
}

bool JobsWantCompaction(int64* bytes) {
  *bytes = 0;
  const int64 min_bytes = pg::CompactMinBytes();
  if (min_bytes < 0 || !MayCompactJobs()) return false;
  const Oid relid = JobsRelid();
  pg::SpiSession spi;
  int64 live = 0;
  *bytes = JobsBytes(spi, relid, &live);
  return *bytes >= min_bytes && live * kLiveJobBytes * kWorthRatio <= *bytes;
}

CompactResult CompactJobs(int lock_timeout_ms, int64 max_jobs, int64 max_bytes) {
  const Oid relid = JobsRelid();
  CompactResult result;
  {
    pg::SpiSession spi;
    result.bytes_before = JobsBytes(spi, relid, nullptr);
  }
  const int64 kept =
      pg::RewriteTableFrozen(relid, "pgq.job_rows", lock_timeout_ms, max_jobs, max_bytes);
  if (kept == pg::kRewriteBusy) {
    result.outcome = CompactOutcome::kBusy;
  } else if (kept == pg::kRewriteTooBig) {
    result.outcome = CompactOutcome::kTooBig;
  } else {
    result.outcome = CompactOutcome::kCompacted;
    result.jobs = kept;
  }
  pg::SpiSession spi;
  result.bytes_after = JobsBytes(spi, relid, nullptr);
  return result;
}

CompactResult MaybeCompactJobs() {
  CompactResult result;
  int64 bytes = 0;
  if (!JobsWantCompaction(&bytes)) {
    result.outcome = CompactOutcome::kNotNeeded;
    result.bytes_before = result.bytes_after = bytes;
    return result;
  }
  return CompactJobs(kAutoLockTimeoutMillis, kAutoMaxJobs, kAutoMaxBytes);
}

int MaybeCompactHolds() {
  // A hold's row with its primary key's entry (and the group index's) is
  // well under this.
  constexpr int64 kLiveHoldBytes = 256;
  const int64 min_bytes = pg::CompactMinBytes();
  if (min_bytes < 0) return 0;
  int rewritten = 0;
  for (const char* name : {"dedupe_holds", "group_holds"}) {
    const Oid relid =
        pg::Guard([&] { return get_relname_relid(name, get_namespace_oid("pgq", false)); });
    if (!OidIsValid(relid) || !pg::Guard([&] { return pg_class_ownercheck(relid, GetUserId()); })) {
      continue;
    }
    int64 live = 0;
    int64 bytes = 0;
    {
      pg::SpiSession spi;
      bytes = JobsBytes(spi, relid, &live);
    }
    if (bytes < min_bytes || live * kLiveHoldBytes * kWorthRatio > bytes) continue;
    const std::string qualified = std::string("pgq.") + name;
    const int64 kept = pg::RewriteTableFrozen(relid, qualified.c_str(), kAutoLockTimeoutMillis,
                                              kAutoMaxJobs, kAutoMaxBytes);
    if (kept >= 0) ++rewritten;
  }
  return rewritten;
}

}  // namespace pgq::service
