// Counting rows as a unique index check sees them: with a dirty snapshot,
// which shows what committed transactions wrote and also what transactions
// still in progress wrote (a row they inserted counts, a row they deleted
// still counts), but nothing of aborted ones.
//
// What it is for: a limit that many sessions enforce at once (a queue's
// max_running, store/claim.cpp). A session that holds a lock while it counts
// and then writes, and releases the lock when its statement is done rather
// than at commit, is seen by the next holder's count whether or not it has
// committed yet; so the limit holds without serializing whole transactions.
#pragma once

#include "pg/pg.h"

namespace pgq::pg {

// The distinct values of int8 column `distinct_column` among the rows of
// `relation` whose entry in `index` has its first (int4) column equal to
// `key` and whose "char" column `char_column` is `char_value`, as a dirty
// snapshot sees them. A row being updated by a transaction in progress shows
// two versions; counting distinct values counts it once. Stops at `limit`.
int64 CountDirty(Oid relation, Oid index, int32 key, AttrNumber distinct_column,
                 AttrNumber char_column, char char_value, int64 limit);

}  // namespace pgq::pg
