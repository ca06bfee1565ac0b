#include "pg/dirty_count.h"

#include <unordered_set>

#include "pg/boundary.h"

extern "C" {
#include "access/genam.h"
#include "access/relscan.h"
#include "access/table.h"
#include "access/tableam.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
}

namespace pgq::pg {

namespace {

// An index scan with its relations and slot; plain pointers (Guard's frames
// hold no object with a destructor). A scan an error interrupts is released
// with the transaction's resources.
struct DirtyScan {
  Relation heap;
  Relation index;
  IndexScanDesc scan;
  TupleTableSlot* slot;
};

}  // namespace

int64 CountDirty(Oid relation, Oid index, int32 key, AttrNumber distinct_column,
                 AttrNumber char_column, char char_value, int64 limit) {
  SnapshotData dirty;
  InitDirtySnapshot(dirty);
  const DirtyScan s = Guard([&] {
    DirtyScan opened;
    opened.heap = table_open(relation, AccessShareLock);
    opened.index = index_open(index, AccessShareLock);
    ScanKeyData scan_key;
    ScanKeyInit(&scan_key, 1, BTEqualStrategyNumber, F_INT4EQ, Int32GetDatum(key));
    opened.scan = index_beginscan(opened.heap, opened.index, &dirty, 1, 0);
    index_rescan(opened.scan, &scan_key, 1, nullptr, 0);
    opened.slot = table_slot_create(opened.heap, nullptr);
    return opened;
  });
  // The set grows outside the guarded calls: an allocation that throws must
  // not unwind through PG_TRY.
  std::unordered_set<int64> seen;
  while (static_cast<int64>(seen.size()) < limit) {
    int64 value = 0;
    bool counted = false;
    const bool more = Guard([&] {
      if (!index_getnext_slot(s.scan, ForwardScanDirection, s.slot)) return false;
      bool is_null = false;
      const Datum state = slot_getattr(s.slot, char_column, &is_null);
      if (is_null || DatumGetChar(state) != char_value) return true;
      const Datum distinct = slot_getattr(s.slot, distinct_column, &is_null);
      if (is_null) return true;
      value = DatumGetInt64(distinct);
      counted = true;
      return true;
    });
    if (!more) break;
    if (counted) seen.insert(value);
  }
  Guard([&] {
    ExecDropSingleTupleTableSlot(s.slot);
    index_endscan(s.scan);
    index_close(s.index, NoLock);
    table_close(s.heap, NoLock);
  });
  return static_cast<int64>(seen.size());
}

}  // namespace pgq::pg
