// What pgq-worker records as a failed job's error: the command's exit status
// and the end of its stderr, as valid UTF-8 text (pgq.fail takes text, and
// PostgreSQL rejects invalid byte sequences and NUL). Pure C++: unit-tested
// in cli/tests.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace pgq::cli {

// The last 4 kB of stderr is plenty to say why a command failed and keeps
// pgq.dead_jobs small.
inline constexpr std::size_t kStderrTailBytes = 4096;

// Keeps the last `capacity` bytes of everything appended.
class StderrTail {
 public:
  explicit StderrTail(std::size_t capacity = kStderrTailBytes) : capacity_(capacity) {}

  void Append(std::string_view bytes);
  const std::string& bytes() const { return bytes_; }
  // Whether bytes were dropped from the front.
  bool truncated() const { return truncated_; }

 private:
  std::size_t capacity_;
  std::string bytes_;
  bool truncated_ = false;
};

// "exit status N", "killed by signal S", from a waitpid() status.
std::string DescribeStatus(int wait_status);

// Valid UTF-8 without NUL: invalid sequences and NUL become U+FFFD. When
// `cut_at_front`, continuation bytes at the start (a character cut in two by
// truncation) are dropped instead.
std::string SanitizeUtf8(std::string_view bytes, bool cut_at_front);

// The error given to pgq.fail: the status on the first line, then the end of
// stderr (trailing whitespace trimmed), "..." in front when it was cut.
std::string FailureText(int wait_status, const StderrTail& tail);

}  // namespace pgq::cli
