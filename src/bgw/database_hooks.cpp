// A utility hook, installed in every backend when preloaded, for the
// statements that concern our workers:
//  - DROP DATABASE, CREATE DATABASE .. TEMPLATE, ALTER DATABASE .. RENAME and
//    .. SET TABLESPACE fail while another session is connected to the
//    database. Our maintenance worker is such a session, so we stop it first
//    and keep it away for a moment (pg::PauseDatabase); PostgreSQL itself
//    waits up to 5 s for the remaining sessions to leave.
//  - CREATE EXTENSION pgq_cpp: when it commits, the launcher is asked to
//    start the database's worker at once instead of at its next probe; the
//    database's queue slots (pg/queue_slots.h) are reset first, and so are
//    its queues' ring lanes and leases (pg/job_ring.h), which belonged to
//    an earlier install: the new one draws the same queue ids again.
//  - DROP EXTENSION pgq_cpp and DROP DATABASE free the lanes and leases of
//    the database's ring queues (a lane is a share of the whole server's).
//
// INVARIANT: the hook's frame holds no C++ object; standard_ProcessUtility
// may longjmp through it.
#include "bgw/bgw.h"
#include "pg/job_ring.h"
#include "pg/queue_slots.h"
#include "pg/shared.h"

extern "C" {
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "commands/extension.h"
#include "tcop/utility.h"
}

namespace pgq::bgw {

namespace {

// Long enough for the statement to finish; if it failed, the worker comes
// back when the pause ends.
constexpr int kPauseSeconds = 10;

ProcessUtility_hook_type prev_utility_hook = nullptr;
bool probe_at_commit = false;

Oid PauseByName(const char* name) {
  if (name == nullptr) return InvalidOid;
  const Oid database = get_database_oid(name, true);
  pg::PauseDatabase(database, kPauseSeconds);
  return database;
}

const char* TemplateOption(List* options) {
  ListCell* cell;
  foreach (cell, options) {
    DefElem* option = static_cast<DefElem*>(lfirst(cell));
    if (strcmp(option->defname, "template") == 0 && option->arg != nullptr) {
      return defGetString(option);
    }
  }
  return nullptr;
}

bool HasOption(List* options, const char* wanted) {
  ListCell* cell;
  foreach (cell, options) {
    if (strcmp(static_cast<DefElem*>(lfirst(cell))->defname, wanted) == 0) return true;
  }
  return false;
}

// Whether the statement drops pgq_cpp.
bool DropsUs(Node* statement) {
  if (nodeTag(statement) != T_DropStmt) return false;
  auto* drop = reinterpret_cast<DropStmt*>(statement);
  if (drop->removeType != OBJECT_EXTENSION) return false;
  ListCell* cell;
  foreach (cell, drop->objects) {
    if (strcmp(strVal(lfirst(cell)), "pgq_cpp") == 0) return true;
  }
  return false;
}

// Returns the database whose worker was paused, if any.
Oid BeforeUtility(Node* statement) {
  switch (nodeTag(statement)) {
    case T_DropdbStmt:
      return PauseByName(reinterpret_cast<DropdbStmt*>(statement)->dbname);
    case T_CreatedbStmt:
      return PauseByName(TemplateOption(reinterpret_cast<CreatedbStmt*>(statement)->options));
    case T_AlterDatabaseStmt: {
      auto* alter = reinterpret_cast<AlterDatabaseStmt*>(statement);
      if (HasOption(alter->options, "tablespace")) return PauseByName(alter->dbname);
      break;
    }
    case T_RenameStmt: {
      auto* rename = reinterpret_cast<RenameStmt*>(statement);
      if (rename->renameType == OBJECT_DATABASE) return PauseByName(rename->subname);
      break;
    }
    case T_CreateExtensionStmt:
      if (strcmp(reinterpret_cast<CreateExtensionStmt*>(statement)->extname, "pgq_cpp") == 0) {
        probe_at_commit = true;
        // Queue ids start again at 1: forget the slots of an earlier install
        // (not of this one, for CREATE EXTENSION IF NOT EXISTS).
        if (!OidIsValid(get_extension_oid("pgq_cpp", true))) {
          pg::ResetDatabaseSlots(true);
          pg::job_ring::ForgetDatabase(MyDatabaseId);
        }
      }
      break;
    default:
      break;
  }
  return InvalidOid;
}

void ProcessUtilityHook(PlannedStmt* pstmt, const char* query_string, bool read_only_tree,
                        ProcessUtilityContext context, ParamListInfo params,
                        QueryEnvironment* query_env, DestReceiver* dest, QueryCompletion* qc) {
  const Oid paused = BeforeUtility(pstmt->utilityStmt);
  if (prev_utility_hook != nullptr) {
    prev_utility_hook(pstmt, query_string, read_only_tree, context, params, query_env, dest, qc);
  } else {
    standard_ProcessUtility(pstmt, query_string, read_only_tree, context, params, query_env, dest,
                            qc);
  }
  // Done (after an error, the pause just runs out): the worker may come back.
  if (OidIsValid(paused)) pg::ResumeDatabase(paused);
  // The rings are gone (their tables locked until the end of the
  // transaction; if it rolls back, the lanes are built again from the rows
  // at their next use).
  if (nodeTag(pstmt->utilityStmt) == T_DropdbStmt && OidIsValid(paused)) {
    pg::job_ring::ForgetDatabase(paused);
  }
  if (DropsUs(pstmt->utilityStmt)) pg::job_ring::ForgetDatabase(MyDatabaseId);
}

void OnTransactionEnd(XactEvent event, void*) {
  if (!probe_at_commit) return;
  if (event == XACT_EVENT_COMMIT) pg::RequestProbe(MyDatabaseId);
  if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT || event == XACT_EVENT_PREPARE) {
    probe_at_commit = false;
  }
}

}  // namespace

void InstallDatabaseHooks() {
  prev_utility_hook = ProcessUtility_hook;
  ProcessUtility_hook = ProcessUtilityHook;
  RegisterXactCallback(OnTransactionEnd, nullptr);
}

}  // namespace pgq::bgw
