// What DISCARD ALL does, for a background worker that runs other roles'
// code in one process (the handler workers, ADR 0012): nothing a handler
// left in the session reaches the next one.
#pragma once

#include "pg/pg.h"

namespace pgq::pg {

// Resets the session as DISCARD ALL does: every setting made with SET or
// set_config(..., false) back to its default, temporary tables and schema
// dropped, prepared statements and WITH HOLD cursors closed, LISTEN
// registrations and session advisory locks released, sequence caches
// forgotten; cached plans are kept (the .cpp says why). Runs in the current
// transaction, which must be a top-level one of its own (not a block, not a
// subtransaction); commit it right after. Raises on failure.
void ResetSession();

}  // namespace pgq::pg
