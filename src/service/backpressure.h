// Backpressure (SPEC §12, ADR 0029 "Backpressure, as built"): a queue's
// max_pending bounds its unfinished jobs. Producers reserve room for the
// jobs they add (enqueue, enqueue_many, publish), or are refused whole with
// 53400; pgq.wait_for_room sleeps until completions make room. The count
// lives in the queue's slot (core/pending_count.h), kept by the ledger's
// notes (pg/ledger.h) and counted here, from the tables, after a start.
#pragma once

#include <optional>
#include <string_view>

#include "core/pending_count.h"
#include "pg/spi.h"

namespace pgq::service {

// Reserves room for `jobs` new jobs of queue `queue_id` (named `name`,
// max_pending `limit`; nothing when `limit` is 0) until the (sub)
// transaction ends, counting the queue first if its count is not known.
// Raises 53400 when they would pass the limit.
void ReserveRoom(pg::SpiSession& spi, int32 queue_id, std::string_view name, int32 limit,
                 int64 jobs);

// Counts the queue's unfinished jobs into its slot: the first count after a
// start, or a check of a kept one (pgq.check_pending, the maintenance).
// nullopt when another backend is counting it, or the count must be made
// again (more commits ended during it than its window holds).
std::optional<core::CountResult> CountPending(pg::SpiSession& spi, int32 queue_id);

// The same until it is made: pgq.check_pending (55000 without a slot).
core::CountResult CheckPending(pg::SpiSession& spi, int32 queue_id, std::string_view name);

// pgq.wait_for_room: true when the queue is below its low-water mark
// within `millis` (at once without max_pending). Woken by the commits that
// finish jobs or change the limit; it looks again every ten seconds anyway.
bool WaitForRoom(pg::SpiSession& spi, std::string_view name, long millis);

}  // namespace pgq::service
