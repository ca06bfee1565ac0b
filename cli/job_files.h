// The files through which a job's command tells pgq-worker more than its exit
// status: its result, its progress, and how long to snooze. They live in a
// directory made for the one job (mkdtemp, mode 0700: no other user can read
// them or plant one) and removed with everything in it after the job. The
// command finds their names in PGQ_RESULT_FILE, PGQ_PROGRESS_FILE and
// PGQ_SNOOZE_FILE; none of them exists until the command writes it.
// Pure C++ (no libpq): unit-tested in cli/tests.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace pgq::cli {

// A result or progress file larger than this is not read (the server's own
// limit, pgq.max_payload_bytes, is 1 MB unless raised).
inline constexpr std::size_t kMaxJsonFileBytes = 64 * 1024 * 1024;
// An interval is a short text.
inline constexpr std::size_t kMaxSnoozeFileBytes = 1024;

class JobFiles {
 public:
  // A new private directory in `parent`; with no parent, in $TMPDIR or else
  // /tmp. Throws std::system_error.
  static JobFiles Create(const std::string& parent = {});

  JobFiles() = default;  // no directory
  JobFiles(JobFiles&& other) noexcept : directory_(std::exchange(other.directory_, {})) {}
  JobFiles& operator=(JobFiles&& other) noexcept;
  JobFiles(const JobFiles&) = delete;
  JobFiles& operator=(const JobFiles&) = delete;
  ~JobFiles() { (void)Remove(); }

  const std::string& directory() const { return directory_; }
  std::string result_path() const { return directory_ + "/result.json"; }
  std::string progress_path() const { return directory_ + "/progress.json"; }
  std::string snooze_path() const { return directory_ + "/snooze"; }

  // The variables for the command's environment (JobEnvironment).
  std::vector<std::pair<std::string, std::string>> Environment() const;

  // Removes the directory and whatever the command left in it. Empty when
  // done (or there was none), else why not.
  std::string Remove();

 private:
  explicit JobFiles(std::string directory) : directory_(std::move(directory)) {}
  std::string directory_;
};

// What a command left in one of its files.
struct FileContent {
  enum class Status {
    kNone,      // no file, or only whitespace in it
    kText,      // text: the bytes, surrounding whitespace trimmed
    kRejected,  // too large, not a regular file, a NUL byte, unreadable: error says which
  };
  Status status = Status::kNone;
  std::string text;
  std::string error;
};

// Reads the file at `path` without blocking (a FIFO is rejected, not
// waited on) and without reading more than max_bytes.
FileContent ReadJobFile(const std::string& path, std::size_t max_bytes);

}  // namespace pgq::cli
