// Which version of pgq's tables is installed in this database: the one
// probe every choice between statement sets asks. A backend can run with a
// newer library than its database's catalog (before ALTER EXTENSION pgq_cpp
// UPDATE), and the update can happen in the middle of a session.
#pragma once

namespace pgq::store {

struct Catalog {
  bool claimer_columns;  // 1.1: pgq.jobs.claimed_by and claimed_at
  bool grants;           // 1.1: pgq.grants
  bool topics;           // 1.2: pgq.topics and pgq.topic_grants
};

// Probed again after any relcache invalidation (an update sends them).
const Catalog& InstalledCatalog();

}  // namespace pgq::store
