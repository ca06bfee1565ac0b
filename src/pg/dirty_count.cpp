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

int64 CountDirty(Oid relation, Oid index, int32 key, AttrNumber distinct_column,
                 AttrNumber char_column, char char_value, int64 limit) {
  std::unordered_set<int64> seen;
  Guard([&] {
    Relation heap = table_open(relation, AccessShareLock);
    Relation index_rel = index_open(index, AccessShareLock);
    SnapshotData dirty;
    InitDirtySnapshot(dirty);
    ScanKeyData scan_key;
    ScanKeyInit(&scan_key, 1, BTEqualStrategyNumber, F_INT4EQ, Int32GetDatum(key));
    IndexScanDesc scan = index_beginscan(heap, index_rel, &dirty, 1, 0);
    index_rescan(scan, &scan_key, 1, nullptr, 0);
    TupleTableSlot* slot = table_slot_create(heap, nullptr);
    while (static_cast<int64>(seen.size()) < limit &&
           index_getnext_slot(scan, ForwardScanDirection, slot)) {
      bool is_null = false;
      const Datum state = slot_getattr(slot, char_column, &is_null);
      if (is_null || DatumGetChar(state) != char_value) continue;
      const Datum value = slot_getattr(slot, distinct_column, &is_null);
      if (is_null) continue;
      seen.insert(DatumGetInt64(value));
    }
    ExecDropSingleTupleTableSlot(slot);
    index_endscan(scan);
    index_close(index_rel, NoLock);
    table_close(heap, NoLock);
  });
  return static_cast<int64>(seen.size());
}

}  // namespace pgq::pg
