// FIFO groups (pgq.enqueue's group_key): the jobs of a group run one at a
// time, in enqueue order.
//
// Only one job of a group is ever pending or running: its head. The others
// wait in state 'w', outside the ready index, so claims never read them.
// Whoever adds a job to a group or removes its head holds the group's lock
// (pg/queue_lock.h) while deciding: an enqueue adds the job waiting when the
// group has any job; a complete, a dead-letter, a cancel or a revival from
// dead-letter then moves the group on: its lowest-id job becomes pending if
// the group has nothing pending or running. A head that fails and retries
// later stays the head, so its group waits for it (by design: order first).
#pragma once

#include <vector>

#include "pg/spi.h"

namespace pgq::api {

struct GroupRef {
  int32 queue_id;
  std::string group_key;
};

// The (queue_id, group_key) pairs of the rows of `result` (a statement that
// returned columns of those names) whose group key is not NULL.
std::vector<GroupRef> GroupsOfResult(const pg::Result& result);

// Moves each group on, in a fixed order (no deadlock between two callers).
void MoveGroupsOn(pg::SpiSession& spi, std::vector<GroupRef> groups);

}  // namespace pgq::api
