#include "pg/row_estimate.h"

#include "pg/boundary.h"

extern "C" {
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/pg_class.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_statistic.h"
#include "optimizer/plancat.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
#include "utils/typcache.h"
}

namespace pgq::pg {

namespace {

// The value's share of the column's rows, as var_eq_const (selfuncs.c)
// reckons it from the statistics tuple; `tuples` is the table's size.
double Frequency(HeapTuple stats, Oid type, Datum value, double tuples) {
  const Form_pg_statistic form = reinterpret_cast<Form_pg_statistic>(GETSTRUCT(stats));
  double ndistinct = form->stadistinct >= 0 ? form->stadistinct : -form->stadistinct * tuples;
  double rest = 1.0 - form->stanullfrac;
  AttStatsSlot mcv;
  if (!get_attstatsslot(&mcv, stats, STATISTIC_KIND_MCV, InvalidOid,
                        ATTSTATSSLOT_VALUES | ATTSTATSSLOT_NUMBERS)) {
    return ndistinct > 1 ? rest / ndistinct : rest;
  }
  TypeCacheEntry* entry = lookup_type_cache(type, TYPECACHE_EQ_OPR_FINFO);
  double least = 1.0;
  double found = -1.0;
  for (int i = 0; i < mcv.nvalues && i < mcv.nnumbers; ++i) {
    rest -= mcv.numbers[i];
    least = Min(least, mcv.numbers[i]);
    if (found < 0 && OidIsValid(entry->eq_opr_finfo.fn_oid) &&
        DatumGetBool(FunctionCall2Coll(&entry->eq_opr_finfo, mcv.stacoll, mcv.values[i], value))) {
      found = mcv.numbers[i];
    }
  }
  const int common = mcv.nvalues;
  free_attstatsslot(&mcv);
  if (found >= 0) return found;
  // Not a common value: an even share of the rest, never more than the
  // least common one.
  const double others = ndistinct - common;
  double share = Max(rest, 0.0);
  if (others > 1) share /= others;
  return Min(share, least);
}

// One table's estimate; -1 without statistics.
double TableEstimate(Oid relation, const char* column, Datum value) {
  const AttrNumber attnum = get_attnum(relation, column);
  if (attnum == InvalidAttrNumber) return -1;
  HeapTuple stats = SearchSysCache3(STATRELATTINH, ObjectIdGetDatum(relation),
                                    Int16GetDatum(attnum), BoolGetDatum(false));
  if (!HeapTupleIsValid(stats)) return -1;
  Relation rel = table_open(relation, AccessShareLock);
  BlockNumber pages = 0;
  double tuples = 0;
  double all_visible = 0;
  estimate_rel_size(rel, nullptr, &pages, &tuples, &all_visible);
  table_close(rel, NoLock);
  const double rows = tuples * Frequency(stats, get_atttype(relation, attnum), value, tuples);
  ReleaseSysCache(stats);
  return rows;
}

}  // namespace

std::optional<double> EstimateEqualRows(Oid relation, const char* column, Datum value) {
  const double rows = Guard([&] {
    if (get_rel_relkind(relation) != RELKIND_PARTITIONED_TABLE) {
      return TableEstimate(relation, column, value);
    }
    double sum = -1;
    List* partitions = find_all_inheritors(relation, AccessShareLock, nullptr);
    ListCell* cell;
    foreach (cell, partitions) {
      const Oid partition = lfirst_oid(cell);
      if (get_rel_relkind(partition) != RELKIND_RELATION) continue;
      const double part = TableEstimate(partition, column, value);
      if (part >= 0) sum = Max(sum, 0.0) + part;
    }
    return sum;
  });
  if (rows < 0) return std::nullopt;
  return rows;
}

}  // namespace pgq::pg
