// Claiming as pgq.claim does, one try at a time: for the SQL function
// (api/claim.cpp, which adds the wait) and the handler workers
// (bgw/handler_worker.cpp, which call it directly).
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "pg/queue_cache.h"
#include "pg/queue_slots.h"
#include "pg/spi.h"
#include "pg/channel_wait.h"

namespace pgq::service {

class Claimer {
 public:
  struct Try {
    // store::Claim's rows, one Result per queue that gave jobs: pgq.
    // claimed_job's columns, then run_at.
    std::vector<pg::Result> jobs;
    long sleep_cap_ms;  // how long a waiting claim may sleep before the next try
    uint64 size() const;
  };

  // `lease` 0: each queue's default lease. `queues` (one or more, distinct)
  // must outlive the Claimer.
  Claimer(pg::SpiSession& spi, std::vector<std::string_view> queues, int32 n, Datum lease);

  // One try: each queue as committed now (a drop raises undefined_object; a
  // pause, a resume, a new default lease, rate limit or cap count), the
  // caller's consume right on each (a revoke counts while waiting), the rate
  // limits' tokens, then the jobs store's statements. `waiter` null: the
  // claim does not wait; otherwise it is armed on the queues' current ids
  // before the statements' snapshots (pg/channel_wait.h).
  Try Once(pg::ChannelWaiter* waiter = nullptr);

 private:
  // Up to `n` jobs of one queue, within its rate limit; how long a waiting
  // claim (`waiting`) may sleep before its next try.
  long ClaimFrom(const pg::CachedQueue& queue, size_t index, int32 n, TimestampTz now, bool waiting,
                 Try* result);
  // A queue on a ring: up to `want` of its jobs, from pgq.job_rows then its
  // ring, within its cap; how many.
  int32 ClaimRingQueue(const pg::CachedQueue& queue, size_t index, int32 want, Datum lease,
                       TimestampTz now, pg::QueueSlot* slot, Try* result);

  pg::SpiSession& spi_;
  std::vector<std::string_view> names_;
  std::vector<Datum> name_datums_;
  int32 n_;
  Datum lease_;
};

}  // namespace pgq::service
