#include "core/validate.h"

namespace pgq::core {

namespace {

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

}  // namespace

bool IsValidQueueName(std::string_view name) {
  if (name.empty() || name.size() > kMaxQueueNameLength) return false;
  if (!IsLowerAlnum(name.front())) return false;
  for (char c : name) {
    if (!IsLowerAlnum(c) && c != '_' && c != '.' && c != '-') return false;
  }
  return true;
}

LeaseCheck CheckLease(int64_t lease_us, int64_t max_lease_us) {
  if (lease_us <= 0) return LeaseCheck::kNotPositive;
  if (lease_us > max_lease_us) return LeaseCheck::kTooLong;
  return LeaseCheck::kOk;
}

}  // namespace pgq::core
