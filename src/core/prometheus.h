// The Prometheus text exposition format (version 0.0.4), which
// pgq.metrics() returns: families of samples, each family introduced by its
// # HELP and # TYPE lines, label values escaped.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace pgq::core {

// A label value with \, " and newline escaped, as the format requires.
std::string EscapeLabelValue(std::string_view value);

// The shortest text that reads back as `value` ("3", "0.25", "1.7e+09");
// NaN and infinities as Prometheus spells them.
std::string FormatSampleValue(double value);

using Label = std::pair<std::string_view, std::string_view>;

class MetricsText {
 public:
  // Starts a family: type is "gauge" or "counter". Its samples must follow
  // before the next family starts.
  void Family(std::string_view name, std::string_view type, std::string_view help);
  // name{label="value",...} value, for the family started last.
  void Sample(std::string_view name, std::initializer_list<Label> labels, double value);

  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

}  // namespace pgq::core
