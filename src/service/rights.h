// Who may do what to a queue (SPEC §7, ADR 0010): checked inside every
// function that touches a queue, against the grants made with pgq.grant and
// the queues' owners, before its statements run as the owner of pgq's
// tables (pg/run_as.h).
//
// The rights are produce, consume and admin (core/rights.h says which
// function takes which). Superusers hold every right; a queue's owner holds
// every right on it; a grant to a role counts for the roles that have its
// privileges. Grants are read into a backend-local list that is reloaded
// after an invalidation of the grants, the queues or the roles
// (pg/invalidation.h; pgq.grant and pgq.revoke announce one at commit), so a
// revoke counts from the next transaction of every session.
#pragma once

#include "core/rights.h"
#include "pg/spi.h"
#include "store/jobs.h"

namespace pgq::service {

// True if `role` holds at least one of `wanted` on the queue (core::kEveryQueue:
// on every queue).
bool HoldsRight(pg::SpiSession& spi, Oid role, int32 queue_id, uint8 wanted);

// Raises insufficient_privilege unless the current user holds at least one
// of `wanted` on the queue `name` (whose id is `queue_id`).
void RequireRight(pg::SpiSession& spi, int32 queue_id, std::string_view name, uint8 wanted);

// The same for a queue known by id (a job's), for the functions that take a
// job id; the message names the queue by id only.
void RequireRightOnQueueId(pg::SpiSession& spi, int32 queue_id, uint8 wanted);

// Raises insufficient_privilege unless the current user holds at least one
// of `wanted` on some queue: what a function that takes a job id checks
// before it touches anything.
void RequireRightSomewhere(pg::SpiSession& spi, uint8 wanted);

// The queues on which the current user holds at least one of `wanted`, as
// parameters of a statement's WHERE clause: `($every OR queue_id = ANY
// ($ids))`. A function that takes a job id finds only the jobs of those
// queues, so a job of any other queue is answered as one that does not
// exist and the caller learns nothing about it (issue 15, L4). Kept until the
// role, `wanted` or the rights change; `ids` is an int4[] in memory of ours.
using QueueScope = store::Scope;
QueueScope QueuesWithRight(pg::SpiSession& spi, uint8 wanted);

// For a function that takes a job id: raises insufficient_privilege when
// the current user holds none of `wanted` on any queue, before anything is
// touched; otherwise the queues it holds them on.
inline QueueScope RequireScope(pg::SpiSession& spi, uint8 wanted) {
  RequireRightSomewhere(spi, wanted);
  return QueuesWithRight(spi, wanted);
}

// Sets parameters `first` (boolean) and `first` + 1 (int4[]) to `scope`.
inline pg::Params& SetScope(pg::Params& params, int first, const QueueScope& scope) {
  return params.Set(first, BoolGetDatum(scope.every)).Set(first + 1, scope.ids);
}

// Raises insufficient_privilege unless the current user holds `wanted` on
// every queue (a grant with queue NULL, or superuser). `action` completes
// "permission denied to ...".
void RequireRightOnEveryQueue(pg::SpiSession& spi, uint8 wanted, std::string_view action);

// Whether `member` has the privileges of `role` (membership with INHERIT,
// as has_privs_of_role), and whether `role` is a superuser.
bool HasPrivsOf(Oid member, Oid role);
bool IsSuperuser(Oid role);

// The current user's name (for messages).
std::string CurrentRoleName();

// For messages: "produce or consume" (the rights in `wanted`), the first of
// them ("produce"), and a value quoted as an SQL literal (quote_literal), so
// that a hint's SQL grants to the role named, whatever its name.
std::string WantedNames(uint8 wanted);
std::string_view FirstRight(uint8 wanted);
std::string Literal(std::string_view value);

}  // namespace pgq::service
