// A heavyweight lock per queue that keeps drop_queue from racing with the
// statements that add jobs to the queue.
//
// Adding a job takes it in share mode until the end of the transaction;
// drop_queue takes it exclusively, so it waits for in-flight enqueues to
// commit (and then deletes their jobs) and makes new ones wait and then find
// the queue gone. It is an advisory lock tag with a field4 of our own (user
// advisory locks use 1 and 2), visible in pg_locks as locktype 'advisory'.
#pragma once

#include "pg/pg.h"

namespace pgq::pg {

void LockQueueShared(int32 queue_id);
// The same without waiting; false if a drop_queue holds or awaits the lock.
// For callers that already hold row locks a waiting drop may need.
bool TryLockQueueShared(int32 queue_id);
void LockQueueExclusive(int32 queue_id);

// The lock of one FIFO group of a queue, exclusive until the end of the
// transaction: taken by whoever adds a job to the group or moves its next
// job up (store/groups.cpp). Groups are told apart by a 32-bit hash of their
// key; two groups that collide only wait for each other.
void LockGroup(int32 queue_id, std::string_view group_key);

// The lock of a queue's max_running: held by one claim at a time while it
// counts the running jobs and takes the ones the cap leaves room for, and
// released when that statement is done (the next holder's count sees its
// claims committed or not, pg/dirty_count.h). A claim that raises before
// releasing it holds it until its (sub)transaction ends.
void LockQueueCap(int32 queue_id);
void UnlockQueueCap(int32 queue_id);

// The lock of a ring job as a parent (ADR 0028 "Dependencies on ring
// jobs"): a child's enqueue that names the job holds it in share mode until
// its transaction ends; whoever ends the job (a completion, a move into
// pgq.job_rows, a tombstone) takes it exclusively while its lane may have
// dependents, so that it waits for the children being added and then reads
// them all. UnlockRingParent lets a share go early (the enqueue waits for
// another transaction's end without holding it).
void LockRingParent(int64 id, bool exclusive);
void UnlockRingParent(int64 id);
// Whether this transaction holds it in share mode already.
bool RingParentHeld(int64 id);

}  // namespace pgq::pg
