// Handler workers: run in-database handlers (create_queue(..., handler)).
// Up to pgq.handler_workers per database, started by its maintenance worker
// while some queue has a handler.
//
// One job at a time, in three transactions, calling the services behind
// pgq.claim, pgq.complete and pgq.fail directly (service/claim.h, store/jobs.h):
//  1. claim one job of a handler queue (as pgq.claim: lease, attempt counted);
//  2. as the queue's owner, with a statement timeout just short of what is left of the
//     lease, call handler(job), then complete(id, attempt) in the same
//     transaction: the handler's writes and the completion commit together
//     or not at all (a completion fenced out by a newer claim rolls the
//     writes back);
//  3. whatever 2 did: the session reset as DISCARD ALL resets it, so that
//     nothing the handler left in this process (settings, temporary tables,
//     prepared statements, cursors, advisory locks, LISTEN) reaches the next
//     handler, another owner's perhaps (ADR 0012);
//  4. if 2 failed: fail(id, attempt, error) — back-off or dead-letter —
//     and the error is logged with the job's id.
// A worker that dies in 2 leaves the job to its lease, like any worker; one
// that cannot reset its session exits, and its successor starts clean.
#include <algorithm>

#include "service/claim.h"
#include "service/handlers.h"
#include "service/rights.h"
#include "bgw/bgw.h"
#include "core/validate.h"
#include "bgw/worker_slot.h"
#include "pg/trace_context.h"
#include "pg/allocator.h"
#include "pg/args.h"
#include "pg/boundary.h"
#include "pg/catalog_version.h"
#include "pg/run_as.h"
#include "pg/session_reset.h"
#include "pg/settings.h"
#include "pg/shared.h"
#include "pg/spi.h"
#include "pg/channel_wait.h"
#include "store/jobs.h"
#include "store/queues.h"

extern "C" {
#include "catalog/pg_extension.h"
#include "commands/extension.h"
#include "pgstat.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/lmgr.h"
#include "tcop/tcopprot.h"
#include "utils/acl.h"
#include "utils/datum.h"
#include "utils/typcache.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"
#include "utils/snapmgr.h"
#include "utils/timeout.h"
#include "utils/wait_event.h"
}

namespace pgq::bgw {

namespace {

// Idle handler workers look for new handler queues and due jobs this often
// (commits that make jobs ready wake them sooner).
constexpr long kIdleMillis = 1000;

// A claimed job, kept in job_context between the transactions.
struct Job {
  int64 id;
  int32 attempt;
  TimestampTz lease_until;
  char* queue;
  char* handler;  // schema-qualified signature, as stored
  char* owner;
  Datum row;            // the pgq.claimed_job value passed to the handler
  Datum trace_context;  // text, or 0: none (the handler runs with it set)
};

MemoryContext job_context = nullptr;

// When a job this worker failed is due again (0: none). Becoming due is not
// a commit, so nothing would wake us: the idle sleep ends then instead.
TimestampTz next_retry = 0;

// Where the round-robin over handler queues starts next time.
uint32 next_queue = 0;

enum class Claimed { kJob, kNone, kNoHandlerQueues };

// Claims one job of some handler queue, in the current transaction.
Claimed ClaimNext(Job* job) {
  pg::SpiSession spi;
  const std::vector<store::HandlerQueue> queues = store::HandlerQueues(spi);
  const uint64 count = queues.size();
  if (count == 0) return Claimed::kNoHandlerQueues;
  for (uint64 i = 0; i < count; ++i) {
    const uint64 row = (next_queue + i) % count;
    const std::string& queue = queues[row].name;
    const std::string& handler = queues[row].handler;
    const std::string& owner = queues[row].owner;
    service::Claimer claimer(spi, {queue}, 1, 0);
    service::Claimer::Try attempt = claimer.Once();
    if (attempt.jobs.empty()) continue;
    const pg::Result& claimed = attempt.jobs.front();
    next_queue = static_cast<uint32>(row + 1);
    // The handler's argument: a pgq.claimed_job made of the claim's columns.
    Datum values[store::kClaimedColumns];
    bool nulls[store::kClaimedColumns];
    for (int column = 0; column < store::kClaimedColumns; ++column) {
      values[column] = claimed.Value(0, column + 1, &nulls[column]);
    }
    const Oid job_type = service::ClaimedJobType();
    bool untraced = true;
    const Datum trace_context = claimed.Value(0, "trace_context", &untraced);
    pg::Guard([&] {
      MemoryContextReset(job_context);
      MemoryContext old = MemoryContextSwitchTo(job_context);
      TupleDesc desc = lookup_rowtype_tupdesc_copy(job_type, -1);
      job->row = HeapTupleGetDatum(heap_form_tuple(desc, values, nulls));
      job->queue = pstrdup(queue.c_str());
      job->handler = pstrdup(handler.c_str());
      job->owner = pstrdup(owner.c_str());
      job->trace_context = untraced ? 0 : datumCopy(trace_context, false, -1);
      MemoryContextSwitchTo(old);
    });
    bool is_null = false;
    job->id = claimed.Int64(0, "id");
    job->attempt = claimed.Int32(0, "attempt");
    job->lease_until = DatumGetTimestampTz(claimed.Value(0, "lease_until", &is_null));
    return Claimed::kJob;
  }
  return Claimed::kNone;
}

// Calls the handler as the queue's owner and completes the job, in the
// current transaction. Raises on any failure, so the caller rolls it back.
void RunHandler(const Job& job) {
  const Oid owner = pg::Guard([&] { return get_role_oid(job.owner, false); });
  const Oid handler = pg::Guard([&] {
    return DatumGetObjectId(
        DirectFunctionCall1(to_regprocedure, PointerGetDatum(cstring_to_text(job.handler))));
  });
  if (!OidIsValid(handler)) {
    pg::Raise(ERRCODE_UNDEFINED_FUNCTION, "handler " + std::string(job.handler) + " does not exist",
              "", "Set another with pgq.alter_queue(queue, handler => ...).");
  }
  const char* call = pg::Guard([&] {
    return psprintf("SELECT %s($1)",
                    quote_qualified_identifier(get_namespace_name(get_func_namespace(handler)),
                                               get_func_name(handler)));
  });
  const Oid job_type = service::ClaimedJobType();

  // A handler that runs past its lease is cancelled: by then the job may be
  // claimed again, and this work must not commit.
  const long left_ms = static_cast<long>((job.lease_until - GetCurrentTimestamp()) / 1000);
  if (left_ms <= 0) {
    pg::Raise(ERRCODE_QUERY_CANCELED,
              "the lease of job " + std::to_string(job.id) + " expired before its handler started");
  }
  // Stop a little before the lease ends (a tenth of what is left, at most a
  // second), so the failure is recorded before maintenance expires the lease.
  const long timeout_ms = std::max(1L, left_ms - std::min(left_ms / 10, 1000L));
  pg::Guard([&] { enable_timeout_after(STATEMENT_TIMEOUT, static_cast<int>(timeout_ms)); });
  // The job's trace context, until the transaction ends: the handler can
  // read it (current_setting('pgq.trace_context')), and every job or event
  // it makes joins the trace (ADR 0030).
  pg::SetTraceContextLocally(job.trace_context);
  {
    pg::SpiSession spi;
    pg::RunAs as_owner(owner);
    Datum args[1] = {job.row};
    Oid types[1] = {job_type};
    pg::Guard([&] { (void)SPI_execute_with_args(call, 1, types, args, nullptr, false, 0); });
  }
  pg::Guard([] { disable_timeout(STATEMENT_TIMEOUT, false); });

  pg::SpiSession spi;
  if (!store::Complete(spi, service::QueuesWithRight(spi, core::kConsume), job.id, job.attempt, 0,
                       pg::Now())) {
    pg::Raise(ERRCODE_T_R_SERIALIZATION_FAILURE,
              "job " + std::to_string(job.id) + " was claimed again before its handler finished",
              "Its handler's writes are rolled back.");
  }
}

// Records the failure as pgq.fail does (error text bounded alike); returns
// its outcome ('retry', 'dead', 'lost') and, for a retry, notes when the job
// is due again.
std::string FailJob(const Job& job, const char* error) {
  pg::SpiSession spi;
  const Datum bounded = pg::BoundedText(error, core::kMaxErrorTextBytes);
  const store::FailOutcome outcome =
      store::Fail(spi, service::QueuesWithRight(spi, core::kConsume), job.id, job.attempt, bounded,
                  std::nullopt, pg::Now());
  if (outcome == store::FailOutcome::kDead) return "dead";
  if (outcome == store::FailOutcome::kLost) return "lost";
  if (const TimestampTz due = store::PendingRunAt(spi, job.id); due != 0) {
    // A noted time already past is stale: its job was claimed again.
    if (next_retry <= GetCurrentTimestamp() || due < next_retry) next_retry = due;
  }
  return "retry";
}

// How long an idle worker sleeps: until its next look, or until a job it
// failed is due again, whichever comes first.
long IdleMillis() {
  if (next_retry == 0) return kIdleMillis;
  const TimestampTz now = GetCurrentTimestamp();
  if (next_retry <= now) {
    next_retry = 0;
    return 1;
  }
  return std::min(kIdleMillis, static_cast<long>((next_retry - now) / 1000) + 1);
}

void HandlerErrorContext(void* arg) {
  const Job* job = static_cast<const Job*>(arg);
  errcontext("pgq handler %s for job %lld (attempt %d) of queue \"%s\"", job->handler,
             static_cast<long long>(job->id), job->attempt, job->queue);
}

bool ExtensionInstalled() {
  const Oid extension = get_extension_oid("pgq_cpp", true);
  if (!OidIsValid(extension)) return false;
  // As the maintenance worker: lock it first, as DROP EXTENSION does.
  LockDatabaseObject(ExtensionRelationId, extension, 0, AccessShareLock);
  return get_extension_oid("pgq_cpp", true) == extension;
}

void StartWork() {
  SetCurrentStatementStartTimestamp();
  StartTransactionCommand();
  PushActiveSnapshot(GetTransactionSnapshot());
}

void EndWork() {
  PopActiveSnapshot();
  CommitTransactionCommand();
  pgstat_report_stat(false);
}

// Logs and rolls back the current error; returns a copy of its message in
// job_context (or nullptr).
char* AbortWork() {
  HOLD_INTERRUPTS();
  disable_timeout(STATEMENT_TIMEOUT, false);
  MemoryContextSwitchTo(job_context);
  ErrorData* error = CopyErrorData();
  EmitErrorReport();
  AbortCurrentTransaction();
  FlushErrorState();
  RESUME_INTERRUPTS();
  return error->message;
}

// Step 3: forgets whatever the handler left in the session, in a transaction
// of its own: it must run whether the handler's committed or not (an
// advisory lock or a prepared statement survives an abort). A session it
// cannot reset ends this process instead of running the next handler in it.
// INVARIANT: no C++ object lives in this frame (PG_TRY).
void ResetAfterHandler() {
  PG_TRY();
  {
    StartWork();
    pg::AtBoundary([] { pg::ResetSession(); });
    EndWork();
  }
  PG_CATCH();
  {
    (void)AbortWork();
    ereport(FATAL, (errmsg("pgq handler worker could not reset its session after a handler"),
                    errdetail("The worker exits so that the next handler runs in a new process.")));
  }
  PG_END_TRY();
  // A handler may have set application_name; the reset took it back to the
  // default, and pg_stat_activity must still say who we are.
  pgstat_report_appname(kHandlerName);
}

// One job, if any. INVARIANT: no C++ object lives in this frame (PG_TRY).
Claimed RunOneJob(Job* job) {
  volatile Claimed claimed = Claimed::kNone;
  PG_TRY();
  {
    StartWork();
    pgstat_report_activity(STATE_RUNNING, "pgq handler: claim");
    if (!ExtensionInstalled()) {
      claimed = Claimed::kNoHandlerQueues;
    } else if (!pg::CatalogIsCurrent("pgq handler worker")) {
      claimed = Claimed::kNone;  // waits for ALTER EXTENSION pgq_cpp UPDATE (ADR 0024)
    } else {
      pg::AtBoundary([&] { claimed = ClaimNext(job); });
    }
    EndWork();
  }
  PG_CATCH();
  {
    (void)AbortWork();
    claimed = Claimed::kNone;
  }
  PG_END_TRY();
  if (claimed != Claimed::kJob) {
    pgstat_report_activity(STATE_IDLE, nullptr);
    return claimed;
  }

  ErrorContextCallback context{error_context_stack, HandlerErrorContext, job};
  char* volatile failure = nullptr;
  PG_TRY();
  {
    StartWork();
    pgstat_report_activity(STATE_RUNNING, job->handler);
    error_context_stack = &context;
    pg::AtBoundary([&] { RunHandler(*job); });
    error_context_stack = context.previous;
    EndWork();
  }
  PG_CATCH();
  {
    error_context_stack = context.previous;
    failure = AbortWork();
  }
  PG_END_TRY();
  // Before anything else runs in this session, pgq.fail included: a
  // read-only default or a timeout the handler set must not reach it.
  ResetAfterHandler();

  if (failure != nullptr) {
    PG_TRY();
    {
      StartWork();
      const char* message = failure;
      char outcome[16] = "";
      pg::AtBoundary(
          [&] { std::snprintf(outcome, sizeof(outcome), "%s", FailJob(*job, message).c_str()); });
      EndWork();
      ereport(LOG, (errmsg("pgq handler %s failed for job %lld (attempt %d) of queue \"%s\": "
                           "%s; the job is %s",
                           job->handler, static_cast<long long>(job->id), job->attempt, job->queue,
                           message,
                           strcmp(outcome, "retry") == 0  ? "retried after its back-off"
                           : strcmp(outcome, "dead") == 0 ? "dead-lettered"
                                                          : "no longer this worker's")));
    }
    PG_CATCH();
    {
      (void)AbortWork();  // the lease will return the job
    }
    PG_END_TRY();
  }
  pgstat_report_activity(STATE_IDLE, nullptr);
  return Claimed::kJob;
}

}  // namespace

BackgroundWorkerHandle* StartHandlerWorker(Oid database, int32 number) {
  char name[BGW_MAXLEN];
  std::snprintf(name, sizeof(name), "%s %d for database %u", kHandlerName, number, database);
  return StartDynamicWorker("pgq_handler_main", kHandlerName, database, number, name);
}

}  // namespace pgq::bgw

void pgq_handler_main(Datum main_arg) {
  using namespace pgq;
  const Oid database = DatumGetObjectId(main_arg);
  bgw::InitWorkerProcess();

  // Numbers beyond pgq.handler_workers are not wanted; a number that runs
  // already is not run twice (TakeSlot): the database's cap.
  const int32 number = bgw::WorkerNumber();
  pg::SharedState* shared = pg::Shared();
  if (shared == nullptr || number < 1 || number > pg::HandlerWorkers()) proc_exit(0);
  if (!bgw::TakeSlot(database, pg::WorkerKind::kHandler, number)) proc_exit(0);
  if (pg::IsDatabasePaused(shared, database, GetCurrentTimestamp())) proc_exit(0);
  BackgroundWorkerInitializeConnectionByOid(database, InvalidOid, 0);
  pgstat_report_appname(bgw::kHandlerName);
  // A database pgq.databases does not list gets no handler worker either.
  const char* name = bgw::DatabaseName();
  if (!bgw::IsListedDatabase(name)) proc_exit(0);
  bgw::job_context =
      AllocSetContextCreate(TopMemoryContext, "pgq handler job", ALLOCSET_DEFAULT_SIZES);

  bgw::Job job{};
  for (;;) {
    CHECK_FOR_INTERRUPTS();
    if (ConfigReloadPending) {
      ConfigReloadPending = false;
      ProcessConfigFile(PGC_SIGHUP);
      if (!bgw::IsListedDatabase(name) || number > pg::HandlerWorkers()) proc_exit(0);
    }
    // Armed before looking, so a job committed meanwhile wakes us.
    pg::ArmWaiter(pg::Channel::AnyQueue());
    const bgw::Claimed claimed = bgw::RunOneJob(&job);
    if (claimed == bgw::Claimed::kNoHandlerQueues) proc_exit(0);
    if (claimed == bgw::Claimed::kJob) continue;
    (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, bgw::IdleMillis(),
                    PG_WAIT_EXTENSION);
  }
}
