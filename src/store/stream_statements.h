// The statements of one stream's event tables, shared by the two files of
// the streams store. Their text names the stream's tables (built from its
// id, never a user's value), so they are prepared per stream and kept for
// the backend's life like every statement of ours.
#pragma once

#include <string>

#include "store/streams.h"

namespace pgq::store::streams::detail {

class OwnedStatement {
 public:
  OwnedStatement(std::string sql, std::initializer_list<Oid> argtypes);
  ~OwnedStatement();
  OwnedStatement(const OwnedStatement&) = delete;
  OwnedStatement& operator=(const OwnedStatement&) = delete;
  pg::Statement& get() { return statement_; }

 private:
  std::string sql_;
  pg::Statement statement_;
};

struct StreamStatements {
  explicit StreamStatements(int32 stream_id);
  // $1 done snapshot, $2 window end snapshot (NULL: cut one now), $3 $4
  // the lower bound (txid, id) of the range part, $5 $6 the upper bound, $7
  // limit, $8 $9 the cursor: the window's events after the cursor in (txid,
  // id) order, each with the window's end and the time it was read.
  OwnedStatement read_window;
  // $1 stream id, $2 segment: whether every consumer has finished every
  // event of the segment.
  OwnedStatement segment_finished;
  // $1 done snapshot, $2 window end (or NULL), $3 $4 cursor: how many
  // events the consumer has not finished (at most kPendingCap), and the
  // time the oldest of them was appended.
  OwnedStatement pending;
  // $1 stream id: whether a transaction id stored with the stream (an
  // event's, a consumer's snapshot) is beyond what this cluster has handed
  // out: the database was restored from a dump of another cluster.
  OwnedStatement needs_rebase;
  // $1 stream id, $2 the rebasing transaction's id: every consumer moved to
  // a position of that transaction (before its first unfinished event in id
  // order), then every event given that id.
  OwnedStatement rebase_consumers;
  OwnedStatement rebase_events;
};

inline constexpr int64 kPendingCap = 100000;

// The statements of `stream_id`, prepared on first use.
StreamStatements& StatementsOf(int32 stream_id);

}  // namespace pgq::store::streams::detail
