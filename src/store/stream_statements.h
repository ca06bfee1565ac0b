// The statements of one stream's event tables, shared by the two files of
// the streams store. Their text names the stream's tables (built from its
// id, never a user's value), so they are prepared per stream and kept for
// the backend's life like every statement of ours (a dropped stream's stay
// until the backend ends: a few plans per stream ever used).
#pragma once

#include <string>

#include "store/streams.h"

namespace pgq::store::streams::detail {

struct StreamStatements {
  explicit StreamStatements(int32 stream_id);
  // $1 done snapshot, $2 window end snapshot (NULL: cut one now), $3 $4
  // the lower bound (txid, id) of the range part, $5 $6 the upper bound, $7
  // limit, $8 $9 the cursor, $10 the byte budget: the window's events after
  // the cursor in (txid, id) order, each with the window's end, the time
  // it was read and the payload bytes up to and including it.
  pg::BuiltStatement read_window;
  // $1 stream id, $2 segment: whether every consumer has finished every
  // event of the segment.
  pg::BuiltStatement segment_finished;
  // $1 stream id, $2 limit: each consumer (stream, consumer, batch_open,
  // batch_opened_at, finished_events, last_finished_at) with how many
  // events it has not finished (pending; index-only, at most 4 * $2 index
  // entries read: more than $2 means more than $2) and the append time of
  // the first of them in (txid, id) order (oldest), by consumer name.
  pg::BuiltStatement consumer_stats;
  // $1 stream id: the newest event's transaction id and the largest xmax
  // of the consumers' snapshots (newest_txid, newest_xmax; NULL when none),
  // for the check that the database was restored from another cluster.
  pg::BuiltStatement stored_xids;
  // $1 stream id, $2 the rebasing transaction's id: every consumer moved to
  // a position of that transaction (before its first unfinished event in id
  // order), then every event given that id.
  pg::BuiltStatement rebase_consumers;
  pg::BuiltStatement rebase_events;
};

// The statements of `stream_id`, prepared on first use.
StreamStatements& StatementsOf(int32 stream_id);

// stream_batches.cpp, the file that writes pgq.stream_consumers: the text of
// rebase_consumers, and running it for the rebase after a restore ($2, the
// rebasing transaction's id `txid`).
std::string RebaseConsumersSql(const std::string& table);
void RebaseConsumers(pg::SpiSession& spi, int32 stream_id, Datum txid);

}  // namespace pgq::store::streams::detail
