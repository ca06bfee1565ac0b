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

void InsertRow(Oid relid, const Datum* values, const bool* nulls) {
  RequireInsertAllowed();
  Guard([&] {
    Relation rel = table_open(relid, RowExclusiveLock);
    EState* estate = CreateExecutorState();
    ResultRelInfo* result = makeNode(ResultRelInfo);
    // No range table entry: constraint errors describe the row without
    // per-column privileges, as for a relation the caller owns.
    InitResultRelInfo(result, rel, 0, nullptr, 0);
    ExecOpenIndices(result, false);
    TupleTableSlot* slot =
        MakeSingleTupleTableSlot(RelationGetDescr(rel), table_slot_callbacks(rel));
    ExecClearTuple(slot);
    const int natts = RelationGetDescr(rel)->natts;
    for (int i = 0; i < natts; ++i) {
      slot->tts_values[i] = values[i];
      slot->tts_isnull[i] = nulls[i];
    }
    ExecStoreVirtualTuple(slot);
    if (rel->rd_att->constr != nullptr) ExecConstraints(result, slot, estate);
    table_tuple_insert(rel, slot, GetCurrentCommandId(true), 0, nullptr);
    if (result->ri_NumIndices > 0) {
      (void)ExecInsertIndexTuples(result, slot, estate, false, false, nullptr, NIL);
    }
    ExecCloseIndices(result);
    ExecDropSingleTupleTableSlot(slot);
    FreeExecutorState(estate);
    table_close(rel, NoLock);
  });
}

}  // namespace pgq::pg
