#include "store/catalog.h"

#include "pg/boundary.h"
#include "pg/queue_cache.h"

extern "C" {
#include "catalog/namespace.h"
#include "utils/lsyscache.h"
}

namespace pgq::store {

const Catalog& InstalledCatalog() {
  static Catalog catalog{};
  static bool probed = false;
  static uint64 probed_generation = 0;
  const uint64 generation = pg::QueueCache::Generation();
  if (probed && generation == probed_generation) return catalog;
  catalog = pg::Guard([] {
    Catalog found{};
    const Oid schema = get_namespace_oid("pgq", true);
    if (!OidIsValid(schema)) return found;
    const Oid jobs = get_relname_relid("jobs", schema);
    found.claimer_columns = OidIsValid(jobs) && get_attnum(jobs, "claimed_by") != InvalidAttrNumber;
    found.grants = OidIsValid(get_relname_relid("grants", schema));
    found.topics = OidIsValid(get_relname_relid("topics", schema));
    return found;
  });
  probed_generation = generation;
  probed = true;
  return catalog;
}

}  // namespace pgq::store
