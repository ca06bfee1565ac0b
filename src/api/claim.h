// Claiming as pgq.claim does, one try at a time: for the SQL function
// (which adds the wait) and the handler workers (which call it directly).
#pragma once

#include <optional>
#include <string_view>

#include "pg/args.h"
#include "pg/spi.h"
#include "pg/wakeup.h"

namespace pgq::api {

// What a worker holds after a claim: the job and the attempt its lease is
// for. complete, fail, extend and release take it as their first two
// arguments (id, attempt).
struct ClaimId {
  int64 id;
  int32 attempt;
};
inline ClaimId ClaimIdArgs(FunctionCallInfo fcinfo) {
  return ClaimId{pg::RequiredInt64(fcinfo, 0, "id"), pg::RequiredInt32(fcinfo, 1, "attempt")};
}

class Claimer {
 public:
  struct Try {
    pg::Result jobs;    // store::Claim's rows: pgq.claimed_job's columns, then run_at
    long sleep_cap_ms;  // how long a waiting claim may sleep before the next try
  };

  // `lease` 0: the queue's default lease. `queue` must outlive the Claimer.
  Claimer(pg::SpiSession& spi, std::string_view queue, int32 n, Datum lease);

  // One try: the queue as committed now (a drop raises undefined_object; a
  // pause, a resume, a new default lease or rate limit count), the caller's
  // consume right (a revoke counts while waiting), the rate limit's tokens,
  // then the jobs store's statement. `waiter` null: the claim does not wait;
  // otherwise it is armed before the statement's snapshot (pg/wakeup.h), and
  // created or replaced for the queue's current id.
  Try Once(std::optional<pg::ClaimWaiter>* waiter = nullptr);

 private:
  pg::SpiSession& spi_;
  std::string_view name_;
  Datum name_datum_;
  int32 n_;
  Datum lease_;
  int32 waiter_queue_ = 0;
};

}  // namespace pgq::api
