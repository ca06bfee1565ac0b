// Who holds which right on a queue: pgq.grants (one row per role, queue or
// every queue, and privilege), read with each queue's owner. The rule is
// core::HoldsRight; the check every SQL function makes is service/rights.h, and
// pgq.grant and pgq.revoke are api/grants.cpp.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "core/rights.h"
#include "pg/spi.h"

namespace pgq::store {

// Grants `privilege` on queue `queue_id` (nullopt: every queue) to `role`;
// false when it held it already.
bool InsertGrant(pg::SpiSession& spi, Oid role, std::optional<int32> queue_id,
                 std::string_view privilege);
// Revokes it; false when there was no such grant.
bool DeleteGrant(pg::SpiSession& spi, Oid role, std::optional<int32> queue_id,
                 std::string_view privilege);
// Deletes the grants of roles dropped since: they grant nothing (no current
// role has a dropped role's privileges), and are deleted before the OID
// could ever name another role.
void DropOrphanGrants(pg::SpiSession& spi);

// Every holder of a right: the grants (queue_id 0 for every queue) and each
// queue's owner with every right. Rows of roles dropped since are listed
// until DropOrphanGrants; they grant nothing.
std::vector<core::RightsHolder> RightsHolders(pg::SpiSession& spi);

// The rows of a rights statement (columns role, `object_column` and
// rights: queue or stream rights alike) as holders; frees the rows.
std::vector<core::RightsHolder> HoldersOfRows(pg::Result& rows, const char* object_column);

}  // namespace pgq::store
