#include "store/catalog.h"

#include "pg/boundary.h"
#include "pg/invalidation.h"

extern "C" {
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "utils/syscache.h"
#include "utils/lsyscache.h"
}

namespace pgq::store {

const Catalog& InstalledCatalog() {
  static Catalog catalog{};
  // Re-read after any change of any relation's definition (an update
  // script's ALTER TABLE, CREATE TABLE) or of the schema.
  static pg::CacheEpoch probed{pg::invalidation::kAnyRelation | pg::invalidation::kSchema};
  if (probed.Valid()) return catalog;
  const uint64 begun = probed.Begin();
  catalog = pg::Guard([] {
    Catalog found{};
    const Oid schema = get_namespace_oid("pgq", true);
    if (!OidIsValid(schema)) return found;
    const Oid jobs = get_relname_relid("job_rows", schema);
    found.jobs = jobs;
    found.job_id_seq = get_relname_relid("job_id_seq", schema);
    found.claim_seq = get_relname_relid("claim_seq", schema);
    if (OidIsValid(jobs)) {
      JobColumns& c = found.job_columns;
      HeapTuple relation = SearchSysCache1(RELOID, ObjectIdGetDatum(jobs));
      if (HeapTupleIsValid(relation)) {
        c.natts = reinterpret_cast<Form_pg_class>(GETSTRUCT(relation))->relnatts;
        ReleaseSysCache(relation);
      }
      c.id = get_attnum(jobs, "id");
      c.queue_id = get_attnum(jobs, "queue_id");
      c.state = get_attnum(jobs, "state");
      c.priority = get_attnum(jobs, "priority");
      c.run_at = get_attnum(jobs, "run_at");
      c.attempt = get_attnum(jobs, "attempt");
      c.max_attempts = get_attnum(jobs, "max_attempts");
      c.enqueued_at = get_attnum(jobs, "enqueued_at");
      c.payload = get_attnum(jobs, "payload");
      c.last_error = get_attnum(jobs, "last_error");
      c.has_dependents = get_attnum(jobs, "has_dependents");
      c.trace_context = get_attnum(jobs, "trace_context");
      c.claimed_at = get_attnum(jobs, "claimed_at");
      c.claimed_by = get_attnum(jobs, "claimed_by");
      c.lease_until = get_attnum(jobs, "lease_until");
      c.group_key = get_attnum(jobs, "group_key");
      c.dedupe_key = get_attnum(jobs, "dedupe_key");
      c.dedupe_for = get_attnum(jobs, "dedupe_for");
      c.progress = get_attnum(jobs, "progress");
    }
    found.running_index = get_relname_relid("jobs_lease_idx", schema);
    found.ready_index = get_relname_relid("jobs_ready_idx", schema);
    found.dead_jobs = get_relname_relid("dead_jobs", schema);
    return found;
  });
  probed.Mark(begun);
  return catalog;
}

}  // namespace pgq::store
