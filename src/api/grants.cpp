// pgq.grant, pgq.revoke and pgq.has_queue_privilege: the per-queue rights
// that service/rights.h checks.
//
// Who may change them: for one queue, its owner (or a member of the owning
// role) and superusers; for every queue (queue NULL), superusers. An admin
// right on a queue does not include changing who holds rights on it, so
// the three rights stay separate (docs/security.md).
#include "service/queue_ref.h"
#include "service/rights.h"
#include "pg/args.h"
#include "pg/invalidation.h"
#include "store/grants.h"
#include "store/queues.h"

extern "C" {
#include "utils/acl.h"
}

namespace pgq::api {

namespace {

uint8 RightArg(FunctionCallInfo fcinfo, int index, bool list) {
  const std::string_view text = pg::RequiredText(fcinfo, index, "privilege");
  const std::optional<uint8> rights = list ? core::ParseRights(text) : core::ParseRight(text);
  if (!rights) {
    pg::Raise(ERRCODE_INVALID_PARAMETER_VALUE,
              "unrecognized privilege type \"" + std::string(text) + "\"", {},
              "Use produce, consume or admin.");
  }
  return *rights;
}

Datum ChangeGrant(FunctionCallInfo fcinfo, bool give) {
  const Oid role = pg::RoleArg(fcinfo, 0);
  const bool every_queue = pg::ArgIsNull(fcinfo, 1);
  const std::string_view queue = every_queue ? std::string_view() : pg::QueueNameArg(fcinfo, 1);
  const uint8 right = RightArg(fcinfo, 2, false);
  const char* verb = give ? "grant" : "revoke";
  const Oid me = GetUserId();
  const bool superuser = pg::Guard([me] { return superuser_arg(me); });

  pg::SpiSession spi;
  int32 queue_id = 0;
  if (every_queue) {
    if (!superuser) {
      pg::Raise(ERRCODE_INSUFFICIENT_PRIVILEGE,
                std::string("permission denied to ") + verb + " rights on every queue",
                "Only a superuser may.",
                "A queue's owner can " + std::string(verb) + " rights on that queue: name it.");
    }
  } else {
    // The queue row stays locked until commit, so it cannot be dropped
    // between the check of its owner and the grant's insert.
    const std::optional<store::QueueOwner> found = store::LockQueueOwner(spi, queue);
    if (!found) service::RaiseUnknownQueue(queue);
    queue_id = found->id;
    const std::string& owner_name = found->owner;
    const Oid owner = pg::Guard([&] { return get_role_oid(owner_name.c_str(), true); });
    const bool owns = OidIsValid(owner) && pg::Guard([&] { return has_privs_of_role(me, owner); });
    if (!superuser && !owns) {
      pg::Raise(ERRCODE_INSUFFICIENT_PRIVILEGE,
                std::string("permission denied to ") + verb + " rights on queue \"" +
                    std::string(queue) + "\"",
                "Only its owner (role \"" + owner_name + "\") or a superuser may.");
    }
  }
  const std::optional<int32> on = every_queue ? std::nullopt : std::optional<int32>(queue_id);
  const std::string_view privilege = core::RightName(right);
  const bool changed = give ? store::InsertGrant(spi, role, on, privilege)
                            : store::DeleteGrant(spi, role, on, privilege);
  // Every session checks rights from a list it reloads on invalidation.
  if (changed) pg::invalidation::Announce(pg::invalidation::kQueueGrants);
  PG_RETURN_BOOL(changed);
}

Datum HasQueuePrivilege(FunctionCallInfo fcinfo, Oid role, int queue_arg) {
  const std::string_view name = pg::QueueNameArg(fcinfo, queue_arg);
  const uint8 rights = RightArg(fcinfo, queue_arg + 1, true);
  pg::SpiSession spi;
  const pg::CachedQueue queue = service::CurrentQueue(spi, name);  // undefined_object
  PG_RETURN_BOOL(service::HoldsRight(spi, role, queue.id, rights));
}

}  // namespace

}  // namespace pgq::api

using namespace pgq;

// grant(role, queue, privilege) returns whether role did not hold it yet
PGQ_FUNCTION(pgq_grant) { return api::ChangeGrant(fcinfo, true); }

// revoke(role, queue, privilege) returns whether there was such a grant
PGQ_FUNCTION(pgq_revoke) { return api::ChangeGrant(fcinfo, false); }

// has_queue_privilege(queue, privilege)
PGQ_FUNCTION(pgq_has_queue_privilege) { return api::HasQueuePrivilege(fcinfo, GetUserId(), 0); }

// has_queue_privilege(role, queue, privilege)
PGQ_FUNCTION(pgq_has_role_queue_privilege) {
  return api::HasQueuePrivilege(fcinfo, pg::RoleArg(fcinfo, 0), 1);
}
