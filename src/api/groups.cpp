#include "api/groups.h"

#include <algorithm>

#include "pg/args.h"
#include "pg/queue_lock.h"
#include "pg/wakeup.h"

namespace pgq::api {

namespace {

// $1 queue id, $2 group key. Run under the group's lock, after the change.
pg::Statement promote_next = {
    "UPDATE pgq.jobs j SET state = 'p'"
    " WHERE j.id = (SELECT w.id FROM pgq.jobs w WHERE w.queue_id = $1 AND w.group_key = $2"
    "                ORDER BY w.id LIMIT 1)"
    "   AND j.state = 'w'"
    "   AND NOT EXISTS (SELECT 1 FROM pgq.jobs h"
    "                    WHERE h.queue_id = $1 AND h.group_key = $2 AND h.state <> 'w')"
    " RETURNING j.priority, j.run_at, j.id",
    2,
    {INT4OID, TEXTOID},
    nullptr};

}  // namespace

std::vector<GroupRef> GroupsOfResult(const pg::SpiSession& spi, int queue_column,
                                     int group_column) {
  std::vector<GroupRef> groups;
  const uint64 rows = spi.tuples() == nullptr ? 0 : spi.tuples()->numvals;
  for (uint64 row = 0; row < rows; ++row) {
    bool is_null = false;
    (void)spi.Value(row, group_column, &is_null);
    if (is_null) continue;
    groups.push_back(GroupRef{spi.Int32(row, queue_column), spi.Text(row, group_column)});
  }
  return groups;
}

void MoveGroupsOn(pg::SpiSession& spi, std::vector<GroupRef> groups) {
  const auto before = [](const GroupRef& a, const GroupRef& b) {
    return a.queue_id != b.queue_id ? a.queue_id < b.queue_id : a.group_key < b.group_key;
  };
  const auto same = [](const GroupRef& a, const GroupRef& b) {
    return a.queue_id == b.queue_id && a.group_key == b.group_key;
  };
  std::sort(groups.begin(), groups.end(), before);
  groups.erase(std::unique(groups.begin(), groups.end(), same), groups.end());
  for (const GroupRef& group : groups) {
    pg::LockGroup(group.queue_id, group.group_key);
    pg::Params params;
    params.Set(0, Int32GetDatum(group.queue_id)).Set(1, pg::TextDatum(group.group_key));
    if (spi.Execute(promote_next, params) == 0) continue;
    bool is_null = false;
    const core::ClaimKey key{spi.Int32(0, 1), DatumGetTimestampTz(spi.Value(0, 2, &is_null)),
                             spi.Int64(0, 3)};
    pg::NoteJobsPending(group.queue_id, key, true);
  }
}

}  // namespace pgq::api
