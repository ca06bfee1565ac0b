#include "failure_text.h"

#include <sys/wait.h>

namespace pgq::cli {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

bool IsContinuation(unsigned char byte) { return (byte & 0xC0) == 0x80; }

// Length of the valid UTF-8 sequence at bytes[i], or 0 if it is not one
// (overlong forms, surrogates and code points past U+10FFFF are invalid).
std::size_t ValidSequenceAt(std::string_view bytes, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(bytes[k]); };
  const unsigned char lead = byte(i);
  std::size_t length = 0;
  unsigned char min_second = 0x80;
  unsigned char max_second = 0xBF;
  if (lead >= 0x01 && lead <= 0x7F) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) min_second = 0xA0;  // overlong
    if (lead == 0xED) max_second = 0x9F;  // surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) min_second = 0x90;  // overlong
    if (lead == 0xF4) max_second = 0x8F;  // past U+10FFFF
  } else {
    return 0;  // NUL, a stray continuation byte, or never valid (C0, C1, F5..FF)
  }
  if (i + length > bytes.size()) return 0;
  if (byte(i + 1) < min_second || byte(i + 1) > max_second) return 0;
  for (std::size_t k = 2; k < length; ++k) {
    if (!IsContinuation(byte(i + k))) return 0;
  }
  return length;
}

}  // namespace

void StderrTail::Append(std::string_view bytes) {
  if (bytes.size() >= capacity_) {
    truncated_ = truncated_ || bytes.size() > capacity_ || !bytes_.empty();
    bytes_.assign(bytes.substr(bytes.size() - capacity_));
    return;
  }
  bytes_.append(bytes);
  if (bytes_.size() > capacity_) {
    bytes_.erase(0, bytes_.size() - capacity_);
    truncated_ = true;
  }
}

std::string DescribeStatus(int wait_status) {
  if (WIFEXITED(wait_status)) return "exit status " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) return "killed by signal " + std::to_string(WTERMSIG(wait_status));
  return "ended with wait status " + std::to_string(wait_status);
}

std::string SanitizeUtf8(std::string_view bytes, bool cut_at_front) {
  std::size_t i = 0;
  if (cut_at_front) {
    while (i < bytes.size() && i < 3 && IsContinuation(static_cast<unsigned char>(bytes[i]))) ++i;
  }
  std::string out;
  out.reserve(bytes.size() - i);
  while (i < bytes.size()) {
    const std::size_t length = ValidSequenceAt(bytes, i);
    if (length == 0) {
      out.append(kReplacement);
      ++i;
    } else {
      out.append(bytes.substr(i, length));
      i += length;
    }
  }
  return out;
}

std::string FailureText(int wait_status, const StderrTail& tail) {
  std::string text = DescribeStatus(wait_status);
  std::string err = SanitizeUtf8(tail.bytes(), tail.truncated());
  const std::size_t last = err.find_last_not_of(" \t\r\n");
  err.erase(last == std::string::npos ? 0 : last + 1);
  if (!err.empty()) {
    text += '\n';
    if (tail.truncated()) text += "...";
    text += err;
  }
  return text;
}

}  // namespace pgq::cli
