// pgq.grant, pgq.revoke and pgq.has_queue_privilege: the per-queue rights
// that api/rights.h checks.
//
// Who may change them: for one queue, its owner (or a member of the owning
// role) and superusers; for every queue (queue NULL), superusers. An admin
// right on a queue does not include changing who holds rights on it, so
// the three rights stay separate (docs/security.md).
#include "api/queue_ref.h"
#include "api/rights.h"
#include "pg/args.h"
#include "pg/invalidation.h"

extern "C" {
#include "utils/acl.h"
}

namespace pgq::api {

namespace {

// The queue row stays locked until commit, so it cannot be dropped between
// the check of its owner and the grant's insert.
pg::Statement lock_queue_owner = {
    "SELECT queue_id, owner::text FROM pgq.queues WHERE name = $1 FOR KEY SHARE",
    1,
    {TEXTOID},
    nullptr};

pg::Statement insert_grant = {
    "INSERT INTO pgq.grants (role, queue_id, privilege) VALUES ($1, $2, $3)"
    " ON CONFLICT DO NOTHING",
    3,
    {REGROLEOID, INT4OID, TEXTOID},
    nullptr};

pg::Statement delete_grant = {
    "DELETE FROM pgq.grants"
    " WHERE role = $1 AND queue_id IS NOT DISTINCT FROM $2 AND privilege = $3",
    3,
    {REGROLEOID, INT4OID, TEXTOID},
    nullptr};

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
    pg::Params lookup;
    lookup.Set(0, pg::TextDatum(queue));
    const pg::Result found = spi.Execute(lock_queue_owner, lookup, 1);
    if (found.empty()) RaiseUnknownQueue(queue);
    queue_id = found.Int32(0, 1);
    const std::string owner_name = found.Text(0, 2);
    const Oid owner = pg::Guard([&] { return get_role_oid(owner_name.c_str(), true); });
    const bool owns = OidIsValid(owner) && pg::Guard([&] { return has_privs_of_role(me, owner); });
    if (!superuser && !owns) {
      pg::Raise(ERRCODE_INSUFFICIENT_PRIVILEGE,
                std::string("permission denied to ") + verb + " rights on queue \"" +
                    std::string(queue) + "\"",
                "Only its owner (role \"" + owner_name + "\") or a superuser may.");
    }
  }
  pg::Params params;
  params.Set(0, ObjectIdGetDatum(role))
      .SetOptional(1, every_queue, Int32GetDatum(queue_id))
      .Set(2, pg::TextDatum(core::RightName(right)));
  const bool changed = spi.Execute(give ? insert_grant : delete_grant, params).size() == 1;
  // Every session checks rights from a list it reloads on invalidation.
  if (changed) pg::invalidation::Announce(pg::invalidation::kQueueGrants);
  PG_RETURN_BOOL(changed);
}

Datum HasQueuePrivilege(FunctionCallInfo fcinfo, Oid role, int queue_arg) {
  const std::string_view name = pg::QueueNameArg(fcinfo, queue_arg);
  const uint8 rights = RightArg(fcinfo, queue_arg + 1, true);
  pg::SpiSession spi;
  const pg::CachedQueue queue = CurrentQueue(spi, name);  // undefined_object
  PG_RETURN_BOOL(HoldsRight(spi, role, queue.id, rights));
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
