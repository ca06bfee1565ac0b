// The shared slot every pgq background worker of a database holds while it
// runs (pg/shared.h): who runs where, and why a maintenance worker ended.
#pragma once

#include "pg/shared.h"

namespace pgq::bgw {

// Takes a slot for this process, worker `number` of its kind in `database`
// (0 for the maintenance worker, 1.. for handler workers); false when none is
// free, or when a live worker of that kind and number already runs there
// (started by a launcher or maintenance worker that has since been
// restarted: the new one adopts it). This is the one place that caps a
// database's workers, whatever was killed and in what order. Registers its
// release at exit.
bool TakeSlot(Oid database, pg::WorkerKind kind, int32 number);

// The live workers of `kind` in `database`: pids[number - 1] is the pid of
// worker `number` (1..count), 0 where none runs.
void LiveWorkers(Oid database, pg::WorkerKind kind, pid_t* pids, int count);

// Ends this worker, leaving `reason` for the launcher.
[[noreturn]] void ExitBecause(pg::WorkerExit reason);

// The name of the database this worker is connected to (for the log and
// pgq.databases), in TopMemoryContext.
char* DatabaseName();

// Records the end of a pass that completed.
void RecordPass();

}  // namespace pgq::bgw
