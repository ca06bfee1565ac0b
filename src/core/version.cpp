#include "core/version.h"

#include <cstdint>

namespace pgq::core {

namespace {

// Reads the number at the front of `text` (0 when there is none) and the
// dot after it.
uint64_t TakeNumber(std::string_view* text) {
  uint64_t value = 0;
  std::size_t i = 0;
  while (i < text->size() && (*text)[i] >= '0' && (*text)[i] <= '9' && value < (UINT64_MAX / 10)) {
    value = value * 10 + static_cast<uint64_t>((*text)[i] - '0');
    ++i;
  }
  text->remove_prefix(i);
  if (!text->empty() && text->front() == '.') text->remove_prefix(1);
  return value;
}

bool IsNumeric(std::string_view text) {
  for (const char c : text) {
    if ((c < '0' || c > '9') && c != '.') return false;
  }
  return true;
}

}  // namespace

int CompareVersions(std::string_view a, std::string_view b) {
  if (!IsNumeric(a) || !IsNumeric(b)) return a.compare(b) < 0 ? -1 : (a == b ? 0 : 1);
  while (!a.empty() || !b.empty()) {
    const uint64_t x = TakeNumber(&a);
    const uint64_t y = TakeNumber(&b);
    if (x != y) return x < y ? -1 : 1;
  }
  return 0;
}

}  // namespace pgq::core
