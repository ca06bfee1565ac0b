// Reading SQL arguments with PostgreSQL-style errors for bad input.
#pragma once

#include <string_view>
#include <vector>

#include "pg/boundary.h"

namespace pgq::pg {

bool ArgIsNull(FunctionCallInfo fcinfo, int index);

// Text argument that must not be NULL; `what` names it in the error.
// The view points into the (detoasted) argument, valid for the call.
std::string_view RequiredText(FunctionCallInfo fcinfo, int index, const char* what);

// A queue name argument: not NULL and matching the queue name rules.
std::string_view QueueNameArg(FunctionCallInfo fcinfo, int index);

// A stream or consumer name (`what`: "stream", "consumer"): not NULL, and
// the queue name rules.
std::string_view NameArg(FunctionCallInfo fcinfo, int index, const char* what);

// A text[] of queue names (a claim across queues): not NULL, one
// dimension, 1 to core::kMaxClaimQueues names, each not NULL, valid and
// given once. Views into the argument, valid for the call.
std::vector<std::string_view> QueueNamesArg(FunctionCallInfo fcinfo, int index);

// A name or key of the coordination primitives (team, member, subject,
// switch, ladder, once key): not NULL, 1 to core::kMaxKeyBytes bytes.
std::string_view KeyArg(FunctionCallInfo fcinfo, int index, const char* what);

// A role argument (type name): its OID; 22004 when NULL, 42704 when there is
// no such role.
Oid RoleArg(FunctionCallInfo fcinfo, int index);

// How many rows a listing returns at most (list_jobs, find_jobs,
// job_dependencies, the read surfaces): 100 when NULL, otherwise 1 to
// core::kMaxClaimBatch (22023).
int32 ListMaxArg(FunctionCallInfo fcinfo, int index);

int32 RequiredInt32(FunctionCallInfo fcinfo, int index, const char* what);
int64 RequiredInt64(FunctionCallInfo fcinfo, int index, const char* what);
bool RequiredBool(FunctionCallInfo fcinfo, int index, const char* what);

// An interval as microseconds (months count 30 days, days 24 hours, as
// PostgreSQL's own interval comparison does). Raises on overflow.
int64 IntervalMicros(const Interval* interval, const char* what);
int64 RequiredIntervalMicros(FunctionCallInfo fcinfo, int index, const char* what);

// A span of time given for later (a delay, a keep or dedupe period): not
// negative, at most 100 years (core::kMaxSettingIntervalMicros); 22023
// otherwise. Microseconds; `what` names it in errors.
int64 SpanMicros(const Interval* interval, const char* what);
int64 RequiredSpanMicros(FunctionCallInfo fcinfo, int index, const char* what);

// A jsonb argument other than the payload (a result, a progress report):
// 22001 when it is over pgq.max_payload_bytes.
void CheckJsonSize(Datum value, const char* what);

// A lease argument: > 0 and <= pgq.max_lease.
void CheckLeaseValue(int64 lease_us, const char* what);

// A jsonb payload that must not be NULL and must fit pgq.max_payload_bytes.
Datum RequiredPayload(FunctionCallInfo fcinfo, int index);
void CheckPayloadSize(Datum payload, int64 position);

// A jsonb[] of payloads (enqueue_many, append_many): not NULL (22004), one
// dimension (2202E), no NULL element (22004) and each within
// pgq.max_payload_bytes (54000), the errors naming the position. The
// elements point into the (detoasted) array, valid for the call.
struct PayloadArray {
  ArrayType* array;
  Datum* elements;
  int count;
};
PayloadArray PayloadsArg(FunctionCallInfo fcinfo, int index);
// A text[] of keys for `count` jobs (enqueue_many's group_keys and
// dedupe_keys, named `what`): NULL gives none (an empty vector); else one
// element for every job or one per job (22023 otherwise), one dimension
// (2202E), each element 1 to `max_bytes` bytes (22023, naming its
// position) or NULL (that job has no key: 0). `count` Datums, pointing into
// the (detoasted) array, valid for the call.
std::vector<Datum> KeysForJobsArg(FunctionCallInfo fcinfo, int index, int count, const char* what,
                                  std::size_t max_bytes);

// A text argument cut to at most `max_bytes` (at a character boundary, the
// cut marked with core::kTruncatedMarker); NULL stays NULL (0).
Datum BoundedTextArg(FunctionCallInfo fcinfo, int index, std::size_t max_bytes);
// The same for a text of ours (a handler's error message).
Datum BoundedText(std::string_view value, std::size_t max_bytes);

// An interval of `micros` microseconds, palloc'd (call inside Guard).
Interval* MicrosInterval(int64 micros);

// Builds a text Datum (allocates, so guarded).
Datum TextDatum(std::string_view value);

}  // namespace pgq::pg
