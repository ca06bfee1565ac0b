// W3C Trace Context (Level 1): the rules a job's or an event's trace
// context must follow before it is stored (issue 35, ADR 0030 "Decision 3").
// Refused, not repaired: pgq is an API, not a proxy (our clients trim a
// tracestate per W3C before they send it). Pure C++.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace pgq::core {

// A version-00 traceparent: "00-" 32 hex "-" 16 hex "-" 2 hex.
inline constexpr std::size_t kTraceparentBytes = 55;
inline constexpr std::size_t kMaxTracestateBytes = 512;
inline constexpr int kMaxTracestateMembers = 32;
// A child's trace links to its parents (enqueue's after) at most:
// OpenTelemetry's default limit of links per span.
inline constexpr std::size_t kMaxTraceLinks = 128;

// `value` as a version-00 traceparent (a later version's first 55 bytes,
// as a propagator re-injects it); nullopt, with the rule it breaks in
// `why`, when it is none: version 2 lowercase hex and not "ff"; version
// 00 exactly 55 bytes, a later one at least 55 and a '-' after them; a
// trace-id of 32 and a parent-id of 16 lowercase hex, neither all zeros;
// flags 2 lowercase hex.
std::optional<std::string> NormalizeTraceparent(std::string_view value, std::string* why);

// Whether `value` is a tracestate: at most 512 bytes and 32 members
// `key=value` separated by commas (empty members and spaces or tabs around
// them allowed), each key once, a key lowercase (`vendor` or
// `tenant@system`), a value 1 to 256 printable ASCII characters without
// ',' or '=', not ending in a space. `why` says which rule it breaks.
bool IsValidTracestate(std::string_view value, std::string* why);

// The trace-id of a normalized traceparent (32 hex).
std::string_view TraceIdOf(std::string_view traceparent);

// A job's or an event's stored trace context: the normalized traceparent,
// then, if there is a tracestate, ';' and the tracestate (a traceparent
// holds no ';', so it always ends at byte 55). The setting
// pgq.trace_context holds the same form.
struct TraceContext {
  std::string_view traceparent;
  std::string_view tracestate;  // empty: none
};
// The stored form of `traceparent` and `tracestate` (empty: none);
// nullopt, with the rule broken in `why`, when either breaks one (a
// tracestate's rule after "tracestate: ").
std::optional<std::string> StoredContext(std::string_view traceparent, std::string_view tracestate,
                                         std::string* why);
// `value` in the stored form ("traceparent" or "traceparent;tracestate",
// the setting's text) normalized; nullopt, with `why`, when it is not.
std::optional<std::string> NormalizeStoredContext(std::string_view value, std::string* why);
// The two parts of a stored context.
TraceContext SplitContext(std::string_view stored);

// A new traceparent (version 00, sampled) from 24 random bytes: a trace-id
// of the first 16 and a parent-id of the last 8 (a byte made 1 where they
// are all zeros, which W3C forbids).
std::string NewTraceparent(const unsigned char (&random)[24]);

}  // namespace pgq::core
