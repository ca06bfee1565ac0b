#include "pg/subtransaction.h"

#include "pg/boundary.h"

extern "C" {
#include "access/xact.h"
#include "utils/resowner.h"
}

namespace pgq::pg {

SubTransaction::SubTransaction()
    : context_(CurrentMemoryContext), owner_(CurrentResourceOwner), open_(false) {
  Guard([] { BeginInternalSubTransaction(nullptr); });
  // Begin switched to the subtransaction's context: callers allocate where
  // they did before.
  MemoryContextSwitchTo(context_);
  open_ = true;
}

// Left by an exception: rolled back before the error leaves our function,
// or the caller's own subtransaction (a PL/pgSQL exception block) would be
// ended in its place. A rollback that fails here has nowhere to go: the
// session ends (FATAL), which aborts everything it had open.
SubTransaction::~SubTransaction() {
  if (!open_) return;
  open_ = false;
  MemoryContext context = context_;
  ResourceOwner owner = owner_;
  PG_TRY();
  {
    RollbackAndReleaseCurrentSubTransaction();
    MemoryContextSwitchTo(context);
    CurrentResourceOwner = owner;
  }
  PG_CATCH();
  { ereport(FATAL, (errmsg("pgq: could not roll back a subtransaction"))); }
  PG_END_TRY();
}

void SubTransaction::Commit() { End(true); }

void SubTransaction::Rollback() { End(false); }

void SubTransaction::End(bool commit) {
  if (!open_) return;
  open_ = false;
  Guard([commit] {
    if (commit) {
      ReleaseCurrentSubTransaction();
    } else {
      RollbackAndReleaseCurrentSubTransaction();
    }
  });
  MemoryContextSwitchTo(context_);
  CurrentResourceOwner = owner_;
}

}  // namespace pgq::pg
