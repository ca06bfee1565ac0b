// How many rows of a table hold a value, guessed as the planner guesses it:
// the table's size now (its pages, at the density ANALYZE or VACUUM last
// measured) times the value's frequency in the column's statistics (the
// most common values, else an even share of the rest). For counts that
// would take too long to make exactly on every request (the dashboard's
// overview of a million-job queue); as fresh as autovacuum keeps the
// statistics.
#pragma once

#include <optional>

#include "pg/pg.h"

namespace pgq::pg {

// The estimated number of rows of `relation` whose column `column` equals
// `value` (a Datum of the column's type). A partitioned table sums its
// partitions. nullopt when the column has no statistics yet (never
// analyzed).
std::optional<double> EstimateEqualRows(Oid relation, const char* column, Datum value);

}  // namespace pgq::pg
