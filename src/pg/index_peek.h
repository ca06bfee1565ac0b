// The first entries of a btree index in its order, read without the
// executor: for the claim across several queues (store/claim.cpp), which
// asks each queue's ready index where its next jobs are before it claims.
// A statement would spend more starting up its index scans than reading
// them.
#pragma once

#include <vector>

#include "pg/pg.h"

namespace pgq::pg {

// A position in an index ordered by (int4 prefix, int4, timestamptz, int8),
// as jobs_ready_idx is: (queue_id, - priority, run_at, id).
struct OrderKey {
  int32 second;
  TimestampTz third;
  int64 fourth;
  bool plain = true;  // the row's PeekColumns::unset columns are all NULL
};

// The columns of `relation` whose values make a row's key: the int4 whose
// negation is the index's second column, the timestamptz and the int8; and
// a "char" state.
struct PeekColumns {
  AttrNumber negated, time, id, state;
  AttrNumber unset[2] = {0, 0};  // columns OrderKey::plain looks at (0: none)
};

// Up to `limit` keys of the rows of `relation` reached through `index` whose
// first column equals `prefix` and whose next three are at or after `from`
// (as a row), in index order, among rows visible to a snapshot taken now
// whose time column is at or before `due_by` and whose state is `state`.
// Takes no row lock.
std::vector<OrderKey> PeekIndex(Oid relation, Oid index, int32 prefix, const OrderKey& from,
                                const PeekColumns& columns, TimestampTz due_by, char state,
                                int limit);

}  // namespace pgq::pg
