#include "core/trace_context.h"

#include <algorithm>
#include <set>

namespace pgq::core {

namespace {

bool IsLowerHex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

// `count` lowercase hex digits at `at`.
bool HexRun(std::string_view value, std::size_t at, std::size_t count) {
  for (std::size_t i = at; i < at + count; ++i) {
    if (!IsLowerHex(value[i])) return false;
  }
  return true;
}

bool AllZeros(std::string_view value) {
  return value.find_first_not_of('0') == std::string_view::npos;
}

bool IsLower(char c) { return c >= 'a' && c <= 'z'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsKeyChar(char c) {
  return IsLower(c) || IsDigit(c) || c == '_' || c == '-' || c == '*' || c == '/';
}

// W3C's simple-key (lcalpha 0*255 key chars), or a multi-tenant key
// tenant-id "@" system-id (tenant: lcalpha or digit, then 0*240; system:
// lcalpha, then 0*13).
bool IsTracestateKey(std::string_view key) {
  const std::size_t at = key.find('@');
  auto run = [](std::string_view part, bool digit_first, std::size_t max_rest) {
    if (part.empty() || part.size() > max_rest + 1) return false;
    if (!(IsLower(part[0]) || (digit_first && IsDigit(part[0])))) return false;
    for (std::size_t i = 1; i < part.size(); ++i) {
      if (!IsKeyChar(part[i])) return false;
    }
    return true;
  };
  if (at == std::string_view::npos) return run(key, false, 255);
  return run(key.substr(0, at), true, 240) && run(key.substr(at + 1), false, 13);
}

// 1 to 256 characters of 0x20-0x7E but ',' and '=', the last not a space.
bool IsTracestateValue(std::string_view value) {
  if (value.empty() || value.size() > 256 || value.back() == ' ') return false;
  for (char c : value) {
    if (c < 0x20 || c > 0x7E || c == ',' || c == '=') return false;
  }
  return true;
}

std::string_view Trimmed(std::string_view value) {
  const std::size_t first = value.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  const std::size_t last = value.find_last_not_of(" \t");
  return value.substr(first, last - first + 1);
}

}  // namespace

std::optional<std::string> NormalizeTraceparent(std::string_view value, std::string* why) {
  auto refuse = [&](const char* rule) {
    *why = rule;
    return std::nullopt;
  };
  if (value.size() < kTraceparentBytes) return refuse("It is shorter than 55 bytes.");
  if (!HexRun(value, 0, 2)) return refuse("Its version is not 2 lowercase hex digits.");
  if (value.substr(0, 2) == "ff") return refuse("Its version is ff, which is invalid.");
  if (value.substr(0, 2) == "00" && value.size() != kTraceparentBytes) {
    return refuse("A version 00 traceparent is 55 bytes.");
  }
  if (value.size() > kTraceparentBytes && value[kTraceparentBytes] != '-') {
    return refuse("A later version's fields after the flags start with '-'.");
  }
  if (value[2] != '-' || value[35] != '-' || value[52] != '-') {
    return refuse("Its fields are not separated by '-' at bytes 3, 36 and 53.");
  }
  if (!HexRun(value, 3, 32)) return refuse("Its trace-id is not 32 lowercase hex digits.");
  if (AllZeros(value.substr(3, 32))) return refuse("Its trace-id is all zeros.");
  if (!HexRun(value, 36, 16)) return refuse("Its parent-id is not 16 lowercase hex digits.");
  if (AllZeros(value.substr(36, 16))) return refuse("Its parent-id is all zeros.");
  if (!HexRun(value, 53, 2)) return refuse("Its flags are not 2 lowercase hex digits.");
  std::string normalized = "00";
  normalized.append(value.substr(2, kTraceparentBytes - 2));
  return normalized;
}

bool IsValidTracestate(std::string_view value, std::string* why) {
  if (value.size() > kMaxTracestateBytes) {
    *why = "It is longer than 512 bytes.";
    return false;
  }
  std::set<std::string_view> keys;
  int members = 0;
  std::size_t from = 0;
  for (;;) {
    const std::size_t comma = value.find(',', from);
    const std::string_view member = Trimmed(
        value.substr(from, comma == std::string_view::npos ? value.size() - from : comma - from));
    if (!member.empty()) {
      if (++members > kMaxTracestateMembers) {
        *why = "It has more than 32 members.";
        return false;
      }
      const std::size_t equals = member.find('=');
      if (equals == std::string_view::npos || !IsTracestateKey(member.substr(0, equals)) ||
          !IsTracestateValue(member.substr(equals + 1))) {
        *why = "A member is not key=value by the W3C rules.";
        return false;
      }
      if (!keys.insert(member.substr(0, equals)).second) {
        *why = "A key appears twice.";
        return false;
      }
    }
    if (comma == std::string_view::npos) return true;
    from = comma + 1;
  }
}

std::string_view TraceIdOf(std::string_view traceparent) { return traceparent.substr(3, 32); }

std::optional<std::string> StoredContext(std::string_view traceparent, std::string_view tracestate,
                                         std::string* why) {
  std::optional<std::string> stored = NormalizeTraceparent(traceparent, why);
  if (!stored) return std::nullopt;
  if (!IsValidTracestate(tracestate, why)) {
    *why = "tracestate: " + *why;
    return std::nullopt;
  }
  // A tracestate of nothing but empty members says nothing: not kept.
  if (Trimmed(tracestate).find_first_not_of(", \t") != std::string_view::npos) {
    stored->push_back(';');
    stored->append(tracestate);
  }
  return stored;
}

std::optional<std::string> NormalizeStoredContext(std::string_view value, std::string* why) {
  const std::size_t semicolon = value.find(';');
  if (semicolon == std::string_view::npos) return StoredContext(value, {}, why);
  return StoredContext(value.substr(0, semicolon), value.substr(semicolon + 1), why);
}

TraceContext SplitContext(std::string_view stored) {
  if (stored.size() <= kTraceparentBytes) return {stored, {}};
  return {stored.substr(0, kTraceparentBytes), stored.substr(kTraceparentBytes + 1)};
}

std::string NewTraceparent(const unsigned char (&random)[24]) {
  unsigned char bytes[24];
  std::copy(random, random + 24, bytes);
  if (std::all_of(bytes, bytes + 16, [](unsigned char b) { return b == 0; })) bytes[15] = 1;
  if (std::all_of(bytes + 16, bytes + 24, [](unsigned char b) { return b == 0; })) bytes[23] = 1;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "00-";
  for (int i = 0; i < 24; ++i) {
    if (i == 16) out.push_back('-');
    out.push_back(kHex[bytes[i] >> 4]);
    out.push_back(kHex[bytes[i] & 0xf]);
  }
  out += "-01";
  return out;
}

}  // namespace pgq::core
