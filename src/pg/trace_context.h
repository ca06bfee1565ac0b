// A job's or an event's W3C trace context as the SQL functions take it
// (ADR 0030): from their traceparent/tracestate arguments, else from the
// setting pgq.trace_context, else none. Stored as one text value in
// core::StoredContext's form.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/trace_context.h"
#include "pg/pg.h"

namespace pgq::pg {

// Defines pgq.trace_context (from DefineSettings, before the prefix is
// reserved): a string checked and normalized by core's rules, so a bad
// value is refused by SET or set_config with 22023.
void DefineTraceContextSetting();

// The context of a producing call whose arguments `traceparent_index` and
// the next one are traceparent and tracestate: a text Datum in the
// current memory context, or 0 for none. The arguments when traceparent
// is given (22023 when either breaks a rule), else the setting's value
// (already checked), else none. A tracestate without a traceparent is
// refused (22023).
Datum TraceContextArg(FunctionCallInfo fcinfo, int traceparent_index);

// A child's trace links (text[] in the current memory context; 0: none):
// `traceparents` distinct and sorted, at most core::kMaxTraceLinks.
Datum TraceLinks(std::vector<std::string> traceparents);

// The two parts of a stored context (text; 0: none), pointing into a
// detoasted copy in the current memory context; empty when none.
core::TraceContext ContextParts(Datum stored);
// The columns traceparent and tracestate of a result row from a stored
// context (0: none): values[0], values[1], NULL where absent.
void TraceColumns(Datum stored, Datum* values, bool* nulls);

// A fresh context (a new trace, sampled): what a schedule's firing gets.
Datum NewTraceContext();

// Sets pgq.trace_context to `context` (text, 0: none) until the current
// transaction ends: what an in-database handler's call runs with.
void SetTraceContextLocally(Datum context);

}  // namespace pgq::pg
