#include "pg/session_reset.h"

#include "pg/boundary.h"

extern "C" {
#include "commands/discard.h"
#include "nodes/parsenodes.h"
}

namespace pgq::pg {

// PostgreSQL's own DISCARD ALL rather than a list of our own: whatever a
// future version adds to what a session can hold (and DISCARD ALL learns to
// drop), the handler workers drop too.
void ResetSession() {
  Guard([] {
    DiscardStmt stmt;
    std::memset(&stmt, 0, sizeof(stmt));
    stmt.type = T_DiscardStmt;
    stmt.target = DISCARD_ALL;
    DiscardCommand(&stmt, true);
  });
}

}  // namespace pgq::pg
