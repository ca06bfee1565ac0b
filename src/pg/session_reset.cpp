#include "pg/session_reset.h"

#include "pg/boundary.h"

extern "C" {
#include "catalog/namespace.h"
#include "commands/async.h"
#include "commands/prepare.h"
#include "commands/sequence.h"
#include "storage/lock.h"
#include "utils/guc.h"
#include "utils/portal.h"
}

namespace pgq::pg {

// What PostgreSQL's DiscardAll (commands/discard.c) does, in its order, but
// for ResetPlanCache: every plan of this process would be replanned after
// each handler, which halved the handler workers' throughput (bench/
// RESULTS.md), and it adds nothing here. A cached plan is already replanned
// when the search_path it was made under changes (plancache.c) or an object
// it uses changes, and the temporary objects a plan of a handler could have
// used are dropped below; the next handler's plans never used them.
// INVARIANT: kept in step with DiscardAll on each PostgreSQL major version
// we build for; test/t/012_handler_isolation.pl plants each kind.
void ResetSession() {
  Guard([] {
    PreventInTransactionBlock(true, "the pgq handler session reset");
    PortalHashTableDeleteAll();
    SetPGVariable("session_authorization", NIL, false);
    ResetAllOptions();
    DropAllPreparedStatements();
    Async_UnlistenAll();
    LockReleaseAll(USER_LOCKMETHOD, true);
    ResetTempTableNamespace();
    ResetSequenceCaches();
  });
}

}  // namespace pgq::pg
