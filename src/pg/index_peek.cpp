#include "pg/index_peek.h"

#include "pg/boundary.h"

extern "C" {
#include "access/genam.h"
#include "access/nbtree.h"
#include "access/relscan.h"
#include "access/table.h"
#include "access/tableam.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
}

namespace pgq::pg {

std::vector<OrderKey> PeekIndex(Oid relation, Oid index, int32 prefix, const OrderKey& from,
                                const PeekColumns& columns, TimestampTz due_by, char state,
                                int limit) {
  // Room for every key before the guarded scan: push_back below never
  // allocates (so never throws inside PG_TRY), the loop stops at `limit`.
  std::vector<OrderKey> keys;
  keys.reserve(limit);
  Guard([&] {
    Relation heap = table_open(relation, AccessShareLock);
    Relation index_rel = index_open(index, AccessShareLock);
    Snapshot snapshot = RegisterSnapshot(GetTransactionSnapshot());
    // prefix = $1 AND (second, third, fourth) >= from: the row comparison's
    // members take the opclasses' comparison functions (access/skey.h).
    ScanKeyData row[3];
    ScanKeyEntryInitialize(&row[0], SK_ROW_MEMBER, 2, BTGreaterEqualStrategyNumber, INT4OID,
                           InvalidOid, F_BTINT4CMP, Int32GetDatum(from.second));
    ScanKeyEntryInitialize(&row[1], SK_ROW_MEMBER, 3, BTGreaterEqualStrategyNumber, TIMESTAMPTZOID,
                           InvalidOid, F_TIMESTAMP_CMP, TimestampTzGetDatum(from.third));
    ScanKeyEntryInitialize(&row[2], SK_ROW_MEMBER | SK_ROW_END, 4, BTGreaterEqualStrategyNumber,
                           INT8OID, InvalidOid, F_BTINT8CMP, Int64GetDatum(from.fourth));
    ScanKeyData scan_keys[2];
    ScanKeyInit(&scan_keys[0], 1, BTEqualStrategyNumber, F_INT4EQ, Int32GetDatum(prefix));
    ScanKeyEntryInitialize(&scan_keys[1], SK_ROW_HEADER, 2, BTGreaterEqualStrategyNumber,
                           InvalidOid, InvalidOid, InvalidOid, PointerGetDatum(row));
    IndexScanDesc scan = index_beginscan(heap, index_rel, snapshot, 2, 0);
    index_rescan(scan, scan_keys, 2, nullptr, 0);
    TupleTableSlot* slot = table_slot_create(heap, nullptr);
    while (static_cast<int>(keys.size()) < limit &&
           index_getnext_slot(scan, ForwardScanDirection, slot)) {
      bool is_null = false;
      const Datum row_state = slot_getattr(slot, columns.state, &is_null);
      if (is_null || DatumGetChar(row_state) != state) continue;
      const Datum time = slot_getattr(slot, columns.time, &is_null);
      if (is_null || DatumGetTimestampTz(time) > due_by) continue;
      const Datum negated = slot_getattr(slot, columns.negated, &is_null);
      if (is_null) continue;
      const Datum id = slot_getattr(slot, columns.id, &is_null);
      if (is_null) continue;
      bool plain = true;
      for (const AttrNumber column : columns.unset) {
        if (column != 0) {
          (void)slot_getattr(slot, column, &is_null);
          plain = plain && is_null;
        }
      }
      keys.push_back(
          OrderKey{-DatumGetInt32(negated), DatumGetTimestampTz(time), DatumGetInt64(id), plain});
    }
    ExecDropSingleTupleTableSlot(slot);
    index_endscan(scan);
    UnregisterSnapshot(snapshot);
    index_close(index_rel, NoLock);
    table_close(heap, NoLock);
  });
  return keys;
}

}  // namespace pgq::pg
