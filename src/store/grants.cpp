// The statements on pgq.grants (store/grants.h).
#include "store/grants.h"

#include "pg/args.h"

namespace pgq::store {

namespace {

pg::Statement insert_grant = {
    "INSERT INTO pgq.grants (role, queue_id, privilege) VALUES ($1, $2, $3)"
    " ON CONFLICT DO NOTHING",
    3,
    {REGROLEOID, INT4OID, TEXTOID},
    nullptr};

pg::Statement delete_grant = {
    "DELETE FROM pgq.grants"
    " WHERE role = $1 AND queue_id IS NOT DISTINCT FROM $2 AND privilege = $3",
    3,
    {REGROLEOID, INT4OID, TEXTOID},
    nullptr};

pg::Statement drop_orphan_grants = {
    "DELETE FROM pgq.grants g"
    " WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.oid = g.role::oid)",
    0,
    {},
    nullptr};

pg::Statement load_holders = {
    "SELECT g.role::oid AS role, COALESCE(g.queue_id, 0) AS queue_id,"
    "       CASE g.privilege WHEN 'produce' THEN 1 WHEN 'consume' THEN 2 ELSE 4 END AS rights"
    "  FROM pgq.grants g"
    " UNION ALL "
    "SELECT r.oid, q.queue_id, 7 FROM pgq.queues q JOIN pg_catalog.pg_roles r ON r.rolname = "
    "q.owner",
    0,
    {},
    nullptr};

bool ChangeGrant(pg::SpiSession& spi, pg::Statement& statement, Oid role,
                 std::optional<int32> queue_id, std::string_view privilege) {
  pg::Params params;
  params.Set(0, ObjectIdGetDatum(role))
      .SetOptional(1, !queue_id.has_value(), Int32GetDatum(queue_id.value_or(0)))
      .Set(2, pg::TextDatum(privilege));
  return spi.Execute(statement, params).size() == 1;
}

}  // namespace

bool InsertGrant(pg::SpiSession& spi, Oid role, std::optional<int32> queue_id,
                 std::string_view privilege) {
  return ChangeGrant(spi, insert_grant, role, queue_id, privilege);
}

bool DeleteGrant(pg::SpiSession& spi, Oid role, std::optional<int32> queue_id,
                 std::string_view privilege) {
  return ChangeGrant(spi, delete_grant, role, queue_id, privilege);
}

void DropOrphanGrants(pg::SpiSession& spi) {
  pg::Params none;
  spi.Execute(drop_orphan_grants, none);
}

std::vector<core::RightsHolder> HoldersOfRows(pg::Result& rows, const char* object_column) {
  std::vector<core::RightsHolder> holders;
  holders.reserve(rows.size());
  if (!rows.empty()) {
    const int role = rows.ColumnNumber("role"), object = rows.ColumnNumber(object_column),
              rights = rows.ColumnNumber("rights");
    for (uint64 row = 0; row < rows.size(); ++row) {
      bool is_null = false;
      holders.push_back(core::RightsHolder{DatumGetObjectId(rows.Value(row, role, &is_null)),
                                           rows.Int32(row, object),
                                           static_cast<uint8>(rows.Int32(row, rights))});
    }
  }
  rows.Free();
  return holders;
}

std::vector<core::RightsHolder> RightsHolders(pg::SpiSession& spi) {
  pg::Params none;
  pg::Result rows = spi.Execute(load_holders, none);
  return HoldersOfRows(rows, "queue_id");
}

}  // namespace pgq::store
