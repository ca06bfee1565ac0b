// The environment of a job's command, as pure functions (unit-tested in
// cli/tests/job_environment_test.cpp); process.cpp applies them to the
// worker's own environment.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace pgq::cli {

using Variables = std::vector<std::pair<std::string, std::string>>;

// `inherited` ("NAME=value" entries, as in environ) without the variables
// named in `set` or `removed`, then `set`'s, in order.
inline std::vector<std::string> MergeEnvironment(const std::vector<std::string>& inherited,
                                                 const Variables& set,
                                                 const std::vector<std::string>& removed) {
  const auto named = [](const std::string& entry, const std::string& name) {
    return entry.size() > name.size() && entry.compare(0, name.size(), name) == 0 &&
           entry[name.size()] == '=';
  };
  std::vector<std::string> env;
  for (const std::string& entry : inherited) {
    bool dropped = false;
    for (const auto& [name, value] : set) dropped = dropped || named(entry, name);
    for (const std::string& name : removed) dropped = dropped || named(entry, name);
    if (!dropped) env.push_back(entry);
  }
  for (const auto& [name, value] : set) env.push_back(name + "=" + value);
  return env;
}

// A job's W3C trace context under OpenTelemetry's environment-carrier names,
// TRACEPARENT and TRACESTATE: into `set` when the job has it, into `removed`
// when not. The worker's own (a worker started inside a traced script) is
// another trace's, and must not reach a job as if it were the job's.
inline void AddTraceContext(const std::optional<std::string>& traceparent,
                            const std::optional<std::string>& tracestate, Variables* set,
                            std::vector<std::string>* removed) {
  const auto add = [&](const char* name, const std::optional<std::string>& value) {
    if (value) {
      set->emplace_back(name, *value);
    } else {
      removed->emplace_back(name);
    }
  };
  add("TRACEPARENT", traceparent);
  add("TRACESTATE", tracestate);
}

}  // namespace pgq::cli
