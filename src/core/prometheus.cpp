#include "core/prometheus.h"

#include <charconv>
#include <cmath>

namespace pgq::core {

std::string EscapeLabelValue(std::string_view value) {
  std::string escaped;
  escaped.reserve(value.size());
  for (const char c : value) {
    switch (c) {
      case '\\':
        escaped += "\\\\";
        break;
      case '"':
        escaped += "\\\"";
        break;
      case '\n':
        escaped += "\\n";
        break;
      default:
        escaped += c;
    }
  }
  return escaped;
}

std::string FormatSampleValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

void MetricsText::Family(std::string_view name, std::string_view type, std::string_view help) {
  text_ += "# HELP ";
  text_ += name;
  text_ += ' ';
  // In HELP text only \ and newline are escaped.
  for (const char c : help) {
    if (c == '\\') {
      text_ += "\\\\";
    } else if (c == '\n') {
      text_ += "\\n";
    } else {
      text_ += c;
    }
  }
  text_ += "\n# TYPE ";
  text_ += name;
  text_ += ' ';
  text_ += type;
  text_ += '\n';
}

void MetricsText::Sample(std::string_view name, std::initializer_list<Label> labels, double value) {
  text_ += name;
  if (labels.size() > 0) {
    text_ += '{';
    bool first = true;
    for (const Label& label : labels) {
      if (!first) text_ += ',';
      first = false;
      text_ += label.first;
      text_ += "=\"";
      text_ += EscapeLabelValue(label.second);
      text_ += '"';
    }
    text_ += '}';
  }
  text_ += ' ';
  text_ += FormatSampleValue(value);
  text_ += '\n';
}

}  // namespace pgq::core
