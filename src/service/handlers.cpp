#include "service/handlers.h"

#include "pg/boundary.h"

extern "C" {
#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "commands/user.h"
#include "utils/acl.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"
#include "utils/syscache.h"
}

namespace pgq::service {

namespace {

// What the catalog says about a function, copied out of the syscache.
struct ProcInfo {
  bool found;
  char kind;
  int nargs;
  Oid first_arg;
};

ProcInfo LookUp(Oid handler) {
  ProcInfo info{false, 0, 0, InvalidOid};
  pg::Guard([&] {
    HeapTuple tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(handler));
    if (!HeapTupleIsValid(tuple)) return;
    const auto* proc = reinterpret_cast<Form_pg_proc>(GETSTRUCT(tuple));
    info = ProcInfo{true, proc->prokind, proc->pronargs,
                    proc->pronargs > 0 ? proc->proargtypes.values[0] : InvalidOid};
    ReleaseSysCache(tuple);
  });
  return info;
}

}  // namespace

std::string CheckHandler(Oid handler, Oid owner) {
  const ProcInfo info = LookUp(handler);
  if (!info.found) {
    pg::Raise(ERRCODE_UNDEFINED_FUNCTION,
              "handler function with OID " + std::to_string(handler) + " does not exist");
  }
  const Oid claimed_job = ClaimedJobType();
  char* signature = pg::Guard([&] { return format_procedure_qualified(handler); });
  const std::string name(signature);
  if (info.kind != PROKIND_FUNCTION || info.nargs != 1 || info.first_arg != claimed_job) {
    pg::Raise(ERRCODE_INVALID_OBJECT_DEFINITION,
              "handler " + name + " must be a function taking one argument of type pgq.claimed_job",
              "", "Declare it as CREATE FUNCTION ...(job pgq.claimed_job) RETURNS void.");
  }
  const AclResult acl = pg::Guard([&] { return pg_proc_aclcheck(handler, owner, ACL_EXECUTE); });
  if (acl != ACLCHECK_OK) {
    char* role = pg::Guard([&] { return GetUserNameFromId(owner, false); });
    pg::Raise(ERRCODE_INSUFFICIENT_PRIVILEGE,
              "role \"" + std::string(role) + "\" may not execute handler " + name,
              "Handlers run as the role that owns the queue.",
              "GRANT EXECUTE ON FUNCTION " + name + " TO " + role + ";");
  }
  return name;
}

Oid ClaimedJobType() {
  return pg::Guard([] {
    return GetSysCacheOid2(TYPENAMENSP, Anum_pg_type_oid, CStringGetDatum("claimed_job"),
                           ObjectIdGetDatum(get_namespace_oid("pgq", false)));
  });
}

Oid OwnerRole(std::string_view owner, std::string_view queue) {
  const std::string copy(owner);
  const Oid role = pg::Guard([&] { return get_role_oid(copy.c_str(), true); });
  if (!OidIsValid(role)) {
    pg::Raise(ERRCODE_UNDEFINED_OBJECT, "role \"" + copy + "\", the owner of queue \"" +
                                            std::string(queue) + "\", does not exist");
  }
  return role;
}

}  // namespace pgq::service
