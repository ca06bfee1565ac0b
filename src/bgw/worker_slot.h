// The shared slot every pgq background worker of a database holds while it
// runs (pg/shared.h): who runs where, and why a maintenance worker ended.
#pragma once

#include "pg/shared.h"

namespace pgq::bgw {

// Takes a slot for this process, working in `database`; false when none is
// free, or, for a maintenance worker, when a live one already runs there (the
// launcher restarted and started us again). Registers its release at exit.
bool TakeSlot(Oid database, pg::WorkerKind kind);

// Ends this worker, leaving `reason` for the launcher.
[[noreturn]] void ExitBecause(pg::WorkerExit reason);

// The name of the database this worker is connected to (for the log and
// pgq.databases), in TopMemoryContext.
char* DatabaseName();

// Records the end of a pass that completed.
void RecordPass();

}  // namespace pgq::bgw
