// A job's claim as complete, fail, extend and release take it.
#pragma once

#include "pg/args.h"

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

}  // namespace pgq::api
