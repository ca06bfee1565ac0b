#include "pg/trace_context.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "core/trace_context.h"
#include "pg/args.h"

extern "C" {
#include "catalog/pg_type_d.h"
#include "fmgr.h"
#include "utils/array.h"
#include "utils/guc.h"
}

namespace pgq::pg {

namespace {

char* trace_context_setting = nullptr;

// The setting's value normalized in place (the normal form is never
// longer: a later version's traceparent loses what follows its flags);
// false, with the rule it breaks in `why` (NUL-terminated, cut to its
// size), when it breaks one. Pure C++: no exception leaves it.
bool NormalizeInPlace(char* value, char* why, std::size_t why_size) noexcept {
  try {
    std::string broken;
    const std::optional<std::string> stored = core::NormalizeStoredContext(value, &broken);
    if (stored) {
      std::memcpy(value, stored->c_str(), stored->size() + 1);
      return true;
    }
    std::snprintf(why, why_size, "%s", broken.c_str());
  } catch (...) {
    std::snprintf(why, why_size, "%s", "It could not be checked (out of memory).");
  }
  return false;
}

// The setting's check hook, called by PostgreSQL: the C++ work is done (its
// objects gone) before the GUC_check_* calls, which may raise.
bool CheckTraceContext(char** newval, void** /*extra*/, GucSource /*source*/) {
  if (*newval == nullptr || (*newval)[0] == '\0') return true;
  char why[128];
  if (NormalizeInPlace(*newval, why, sizeof(why))) return true;
  GUC_check_errcode(ERRCODE_INVALID_PARAMETER_VALUE);
  GUC_check_errmsg("pgq.trace_context must be a W3C traceparent, optionally ';' and a tracestate");
  GUC_check_errdetail("%s", why);
  GUC_check_errhint(
      "For example '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', or '' for none.");
  return false;
}

[[noreturn]] void RaiseBad(const char* what, const std::string& why) {
  Raise(ERRCODE_INVALID_PARAMETER_VALUE,
        std::string(what) + " must be a W3C " + what + " (Trace Context Level 1)", why,
        "For example traceparent => '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', "
        "tracestate => 'vendor=value' (or NULL).");
}

}  // namespace

void DefineTraceContextSetting() {
  DefineCustomStringVariable(
      "pgq.trace_context",
      "W3C trace context given to the jobs and events this session or transaction makes.",
      "A traceparent, optionally ';' and a tracestate; used by enqueue, enqueue_many, publish, "
      "append and append_many when no traceparent argument is given. Set it with "
      "set_config('pgq.trace_context', value, true): it then ends with the transaction.",
      &trace_context_setting, "", PGC_USERSET, GUC_NOT_IN_SAMPLE, CheckTraceContext, nullptr,
      nullptr);
}

Datum TraceContextArg(FunctionCallInfo fcinfo, int traceparent_index) {
  const int tracestate_index = traceparent_index + 1;
  if (!ArgIsNull(fcinfo, traceparent_index)) {
    const std::string_view traceparent = RequiredText(fcinfo, traceparent_index, "traceparent");
    const std::string_view tracestate = ArgIsNull(fcinfo, tracestate_index)
                                            ? std::string_view()
                                            : RequiredText(fcinfo, tracestate_index, "tracestate");
    std::string why;
    const std::optional<std::string> stored = core::StoredContext(traceparent, tracestate, &why);
    if (!stored) {
      // StoredContext names a tracestate's rule after "tracestate: ".
      constexpr std::string_view kOfTracestate = "tracestate: ";
      if (why.compare(0, kOfTracestate.size(), kOfTracestate) == 0) {
        RaiseBad("tracestate", why.substr(kOfTracestate.size()));
      }
      RaiseBad("traceparent", why);
    }
    return TextDatum(*stored);
  }
  if (!ArgIsNull(fcinfo, tracestate_index)) {
    Raise(ERRCODE_INVALID_PARAMETER_VALUE, "tracestate needs a traceparent",
          "A tracestate qualifies the trace a traceparent names.",
          "Pass both, or neither (the setting pgq.trace_context is read then).");
  }
  if (trace_context_setting == nullptr || trace_context_setting[0] == '\0') return 0;
  return TextDatum(trace_context_setting);
}

core::TraceContext ContextParts(Datum stored) {
  if (stored == 0) return {};
  const text* detoasted =
      Guard([&] { return pg_detoast_datum_packed(reinterpret_cast<varlena*>(stored)); });
  return core::SplitContext(std::string_view(VARDATA_ANY(detoasted), VARSIZE_ANY_EXHDR(detoasted)));
}

void TraceColumns(Datum stored, Datum* values, bool* nulls) {
  const core::TraceContext parts = ContextParts(stored);
  nulls[0] = parts.traceparent.empty();
  nulls[1] = parts.tracestate.empty();
  if (!nulls[0]) values[0] = TextDatum(parts.traceparent);
  if (!nulls[1]) values[1] = TextDatum(parts.tracestate);
}

Datum TraceLinks(std::vector<std::string> traceparents) {
  if (traceparents.empty()) return 0;
  std::sort(traceparents.begin(), traceparents.end());
  traceparents.erase(std::unique(traceparents.begin(), traceparents.end()), traceparents.end());
  if (traceparents.size() > core::kMaxTraceLinks) traceparents.resize(core::kMaxTraceLinks);
  std::vector<Datum> elements;
  elements.reserve(traceparents.size());
  for (const std::string& traceparent : traceparents) elements.push_back(TextDatum(traceparent));
  return PointerGetDatum(Guard([&] {
    return construct_array(elements.data(), static_cast<int>(elements.size()), TEXTOID, -1, false,
                           TYPALIGN_INT);
  }));
}

Datum NewTraceContext() {
  unsigned char random[24];
  if (!Guard([&] { return pg_strong_random(random, sizeof(random)); })) {
    Raise(ERRCODE_INTERNAL_ERROR, "could not generate a random trace id");
  }
  return TextDatum(core::NewTraceparent(random));
}

void SetTraceContextLocally(Datum context) {
  std::string value;
  if (context != 0) {
    const text* detoasted =
        Guard([&] { return pg_detoast_datum_packed(reinterpret_cast<varlena*>(context)); });
    value.assign(VARDATA_ANY(detoasted), VARSIZE_ANY_EXHDR(detoasted));
  }
  Guard([&] {
    (void)set_config_option("pgq.trace_context", value.c_str(), PGC_USERSET, PGC_S_SESSION,
                            GUC_ACTION_LOCAL, true, 0, false);
  });
}

}  // namespace pgq::pg
