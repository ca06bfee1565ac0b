#include "pg/row_insert.h"

#include "pg/boundary.h"

extern "C" {
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "executor/executor.h"
#include "tcop/utility.h"
#include "utils/rel.h"
}

namespace pgq::pg {

void RequireInsertAllowed() {
  Guard([] {
    PreventCommandIfReadOnly("INSERT");
    PreventCommandIfParallelMode("INSERT");
  });
}

struct RowInserter::State {
  Relation rel;
  EState* estate;
  ResultRelInfo* result;
  TupleTableSlot* slot;
  CommandId command;
};

RowInserter::RowInserter(Oid relid)
    : state_(nullptr), uncaught_at_entry_(std::uncaught_exceptions()) {
  RequireInsertAllowed();
  state_ = Guard([relid] {
    State* state = static_cast<State*>(palloc0(sizeof(State)));
    state->rel = table_open(relid, RowExclusiveLock);
    state->estate = CreateExecutorState();
    state->result = makeNode(ResultRelInfo);
    // No range table entry: constraint errors describe the row without
    // per-column privileges, as for a relation the caller owns.
    InitResultRelInfo(state->result, state->rel, 0, nullptr, 0);
    ExecOpenIndices(state->result, false);
    state->slot =
        MakeSingleTupleTableSlot(RelationGetDescr(state->rel), table_slot_callbacks(state->rel));
    state->command = GetCurrentCommandId(true);
    return state;
  });
}

RowInserter::~RowInserter() {
  if (state_ == nullptr || std::uncaught_exceptions() > uncaught_at_entry_) return;
  State* state = state_;
  // Closing raises nothing; guarded all the same (a destructor must not throw).
  try {
    Guard([state] {
      ExecCloseIndices(state->result);
      ExecDropSingleTupleTableSlot(state->slot);
      FreeExecutorState(state->estate);
      table_close(state->rel, NoLock);
      pfree(state);
    });
  } catch (...) {
  }
}

void RowInserter::Insert(const Datum* values, const bool* nulls) {
  State* state = state_;
  Guard([state, values, nulls] {
    TupleTableSlot* slot = state->slot;
    ExecClearTuple(slot);
    const int natts = RelationGetDescr(state->rel)->natts;
    for (int i = 0; i < natts; ++i) {
      slot->tts_values[i] = values[i];
      slot->tts_isnull[i] = nulls[i];
    }
    ExecStoreVirtualTuple(slot);
    if (state->rel->rd_att->constr != nullptr) ExecConstraints(state->result, slot, state->estate);
    table_tuple_insert(state->rel, slot, state->command, 0, nullptr);
    if (state->result->ri_NumIndices > 0) {
      (void)ExecInsertIndexTuples(state->result, slot, state->estate, false, false, nullptr, NIL);
    }
    // Index expressions and constraints evaluate in the per-tuple context.
    ResetPerTupleExprContext(state->estate);
  });
}

void InsertRow(Oid relid, const Datum* values, const bool* nulls) {
  RowInserter inserter(relid);
  inserter.Insert(values, nulls);
}

}  // namespace pgq::pg
