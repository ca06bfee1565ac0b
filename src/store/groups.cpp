// FIFO groups (pgq.enqueue's group_key): the jobs of a group run one at a
// time (or the queue's group_concurrency at a time), in enqueue order. An enqueue adds a job
// waiting when its group has any job (insert.cpp); a complete, a dead-letter, a cancel or a revival
// then moves the group on. A head that fails and retries later stays the
// head, so its group waits for it (by design: order first).
#include <algorithm>

#include "pg/args.h"
#include "pg/ledger.h"
#include "pg/queue_lock.h"
#include "store/internal.h"

namespace pgq::store::internal {

namespace {

// $1 queue id, $2 its group keys (distinct). Run under every group's lock,
// after the change: the queue's group_concurrency jobs of a group may be
// pending or running; as many waiting ones as there is room for become
// pending, in enqueue (id) order, group by group in one statement (a
// claim of 100 jobs of 100 tenants moved them on by a statement each).
// Jobs waiting for their parents ('b') are not in line. The room is
// counted only when some job waits (an index probe): a group whose jobs
// are all on the ring has none, and its count would cost as much as the
// group is deep at each of its completions.
pg::Statement promote_next = {R"sql(
UPDATE pgq.job_rows j SET state = 'p'
 WHERE j.id = ANY (ARRAY(
   SELECT w.id
     FROM pg_catalog.unnest($2::text[]) g(key)
          CROSS JOIN LATERAL (
            SELECT w.id FROM pgq.job_rows w
             WHERE w.queue_id = $1 AND w.group_key = g.key AND w.state = 'w'
             ORDER BY w.id
             LIMIT CASE WHEN NOT EXISTS (SELECT FROM pgq.job_rows x
                                          WHERE x.queue_id = $1 AND x.group_key = g.key
                                            AND x.state = 'w')
                        THEN 0 ELSE
                   GREATEST(0, (SELECT q.group_concurrency FROM pgq.queues q WHERE q.queue_id = $1)
                               - (SELECT count(*) FROM (
                                    SELECT FROM pgq.job_rows h
                                     WHERE h.queue_id = $1 AND h.group_key = g.key
                                       AND h.state IN ('p', 'r')
                                     LIMIT (SELECT q.group_concurrency FROM pgq.queues q
                                             WHERE q.queue_id = $1)) a)
                               - (SELECT count(*) FROM (
                                    SELECT FROM pgq.group_holds h
                                     WHERE h.queue_id = $1 AND h.group_key = g.key
                                     LIMIT (SELECT q.group_concurrency FROM pgq.queues q
                                             WHERE q.queue_id = $1)) b)) END) w))
RETURNING j.priority, j.run_at, j.id)sql",
                              2,
                              {INT4OID, TEXTARRAYOID},
                              nullptr};

// The keys of `groups` [first, last) as a text[] Datum.
Datum KeyArray(const std::vector<GroupRef>& groups, size_t first, size_t last) {
  std::vector<Datum> keys;
  keys.reserve(last - first);
  for (size_t i = first; i < last; ++i) keys.push_back(pg::TextDatum(groups[i].group_key));
  return PointerGetDatum(pg::Guard([&] {
    return construct_array(keys.data(), static_cast<int>(keys.size()), TEXTOID, -1, false,
                           TYPALIGN_INT);
  }));
}

// $1 queue id, $2 group key, $3 group_concurrency: whether the group has
// room for one more job of its own (a job waits only when it has none).
pg::Statement group_has_room = {R"sql(
SELECT (SELECT count(*) FROM (SELECT FROM pgq.job_rows j
                               WHERE j.queue_id = $1 AND j.group_key = $2 AND j.state <> 'b'
                               LIMIT $3) a)
     + (SELECT count(*) FROM (SELECT FROM pgq.group_holds h
                               WHERE h.queue_id = $1 AND h.group_key = $2 LIMIT $3) b)
       AS taken)sql",
                                3,
                                {INT4OID, TEXTOID, INT4OID},
                                nullptr};

pg::Statement hold_group = {
    "INSERT INTO pgq.group_holds (job_id, queue_id, group_key) VALUES ($1, $2, $3)",
    3,
    {INT8OID, INT4OID, TEXTOID},
    nullptr};

pg::Statement let_groups_go = {
    "DELETE FROM pgq.group_holds WHERE job_id = ANY ($1) RETURNING queue_id, group_key",
    1,
    {INT8ARRAYOID},
    nullptr};

}  // namespace

bool GroupHasRoom(pg::SpiSession& spi, const Queue& queue, Datum group_key) {
  pg::Params params;
  params.Set(0, Int32GetDatum(queue.id))
      .Set(1, group_key)
      .Set(2, Int32GetDatum(std::max(queue.group_concurrency, 1)));
  // Under the group's lock, seeing every decision made before it (each held
  // its lock to its commit), whatever this transaction's snapshot: a
  // REPEATABLE READ one's would miss a job of the group committed since it
  // began, and put a second one of the group on the ring.
  const pg::Result room = spi.ExecuteSeeingLatest(group_has_room, params);
  return !room.empty() && room.Int64(0, "taken") < std::max(queue.group_concurrency, 1);
}

bool TakeGroupRoom(pg::SpiSession& spi, const Queue& queue, Datum group_key, GroupRoom* room) {
  if (room == nullptr) return GroupHasRoom(spi, queue, group_key);
  if (!room->counted) {
    const int32 limit = std::max(queue.group_concurrency, 1);
    pg::Params params;
    params.Set(0, Int32GetDatum(queue.id)).Set(1, group_key).Set(2, Int32GetDatum(limit));
    const pg::Result taken = spi.ExecuteSeeingLatest(group_has_room, params);
    room->left = limit - (taken.empty() ? limit : taken.Int64(0, "taken"));
    room->counted = true;
  }
  if (room->left <= 0) return false;
  --room->left;
  return true;
}

void HoldGroup(pg::SpiSession& spi, int32 queue_id, Datum group_key, int64 job_id) {
  pg::Params params;
  params.Set(0, Int64GetDatum(job_id)).Set(1, Int32GetDatum(queue_id)).Set(2, group_key);
  spi.Execute(hold_group, params);
}

std::vector<GroupRef> LetGroupsGo(pg::SpiSession& spi, const std::vector<int64>& job_ids) {
  if (job_ids.empty()) return {};
  pg::Params params;
  params.Set(0, Int8Array(job_ids));
  return GroupsOf(spi.Execute(let_groups_go, params));
}

std::vector<GroupRef> GroupsOf(const pg::Result& rows) {
  std::vector<GroupRef> groups;
  if (rows.empty()) return groups;
  const int queue_column = rows.ColumnNumber("queue_id");
  const int group_column = rows.ColumnNumber("group_key");
  for (uint64 row = 0; row < rows.size(); ++row) {
    if (rows.IsNull(row, group_column)) continue;
    groups.push_back(GroupRef{rows.Int32(row, queue_column), rows.Text(row, group_column)});
  }
  return groups;
}

void MoveGroupsOn(pg::SpiSession& spi, std::vector<GroupRef> groups) {
  if (groups.empty()) return;
  const auto before = [](const GroupRef& a, const GroupRef& b) {
    return a.queue_id != b.queue_id ? a.queue_id < b.queue_id : a.group_key < b.group_key;
  };
  const auto same = [](const GroupRef& a, const GroupRef& b) {
    return a.queue_id == b.queue_id && a.group_key == b.group_key;
  };
  std::sort(groups.begin(), groups.end(), before);
  groups.erase(std::unique(groups.begin(), groups.end(), same), groups.end());
  // Every lock first, in (queue, key) order: no deadlock between callers.
  for (const GroupRef& group : groups) pg::LockGroup(group.queue_id, group.group_key);
  for (size_t first = 0; first < groups.size();) {
    size_t last = first;
    while (last < groups.size() && groups[last].queue_id == groups[first].queue_id) ++last;
    const int32 queue_id = groups[first].queue_id;
    pg::Params params;
    params.Set(0, Int32GetDatum(queue_id)).Set(1, KeyArray(groups, first, last));
    first = last;
    // Seeing what committed before the groups' locks were ours, whatever
    // this transaction's snapshot: a REPEATABLE READ one's would miss a job
    // that joined a group after it began, and leave it waiting for ever.
    const pg::Result promoted = spi.ExecuteSeeingLatest(promote_next, params);
    if (promoted.empty()) continue;
    // The first of them in claim order lowers the hint.
    const KeyColumns columns(promoted);
    core::ClaimKey first_key = columns.Of(promoted, 0);
    for (uint64 row = 1; row < promoted.size(); ++row) {
      first_key = core::EarlierKey(first_key, columns.Of(promoted, row));
    }
    pg::ledger::NotePending(queue_id, first_key, true);
  }
}

}  // namespace pgq::store::internal
