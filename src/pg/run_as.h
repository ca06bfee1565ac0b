// Running statements as another role, as PostgreSQL's own RI triggers do
// (ri_triggers.c): SetUserIdAndSecContext with SECURITY_LOCAL_USERID_CHANGE,
// which also forbids SET ROLE and SET SESSION AUTHORIZATION inside.
#pragma once

#include "pg/pg.h"

namespace pgq::pg {

// Acts as `role` for its scope; the previous role comes back when the scope
// ends, also when an error unwinds it (the (sub)transaction abort would
// restore it as well).
class RunAs {
 public:
  explicit RunAs(Oid role) {
    GetUserIdAndSecContext(&saved_user_, &saved_context_);
    SetUserIdAndSecContext(role, saved_context_ | SECURITY_LOCAL_USERID_CHANGE);
  }
  ~RunAs() { SetUserIdAndSecContext(saved_user_, saved_context_); }
  RunAs(const RunAs&) = delete;
  RunAs& operator=(const RunAs&) = delete;

 private:
  Oid saved_user_ = InvalidOid;
  int saved_context_ = 0;
};

// The role our statements run as: the owner of schema pgq, the role that
// installed pgq_cpp and owns its tables (ADR 0010). InvalidOid while the
// extension is not installed. Cached until schema pgq changes (pg/invalidation.h).
Oid TablesOwner();

}  // namespace pgq::pg
