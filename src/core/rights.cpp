#include "core/rights.h"

namespace pgq::core {

namespace {

std::string_view Trimmed(std::string_view word) {
  while (!word.empty() && (word.front() == ' ' || word.front() == '\t')) word.remove_prefix(1);
  while (!word.empty() && (word.back() == ' ' || word.back() == '\t')) word.remove_suffix(1);
  return word;
}

bool SameIgnoringCase(std::string_view word, std::string_view lower) {
  if (word.size() != lower.size()) return false;
  for (std::size_t i = 0; i < word.size(); ++i) {
    const char c = word[i];
    if ((c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c) != lower[i]) return false;
  }
  return true;
}

}  // namespace

std::optional<uint8_t> ParseRight(std::string_view word) {
  for (const uint8_t right : {kProduce, kConsume, kAdmin}) {
    if (SameIgnoringCase(word, RightName(right))) return right;
  }
  return std::nullopt;
}

std::optional<uint8_t> ParseRights(std::string_view list) {
  uint8_t mask = 0;
  for (;;) {
    const std::size_t comma = list.find(',');
    const std::optional<uint8_t> right = ParseRight(Trimmed(list.substr(0, comma)));
    if (!right) return std::nullopt;
    mask |= *right;
    if (comma == std::string_view::npos) return mask;
    list.remove_prefix(comma + 1);
  }
}

std::string_view RightName(uint8_t right) {
  switch (right) {
    case kProduce:
      return "produce";
    case kConsume:
      return "consume";
    case kAdmin:
      return "admin";
    default:
      return "";
  }
}

}  // namespace pgq::core
