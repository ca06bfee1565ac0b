#include "job_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace pgq::cli {

namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'; }

std::string Trimmed(const std::string& bytes) {
  std::size_t begin = 0;
  std::size_t end = bytes.size();
  while (begin < end && IsSpace(bytes[begin])) ++begin;
  while (end > begin && IsSpace(bytes[end - 1])) --end;
  return bytes.substr(begin, end - begin);
}

FileContent Rejected(std::string error) {
  FileContent content;
  content.status = FileContent::Status::kRejected;
  content.error = std::move(error);
  return content;
}

// Closes on every path.
struct OpenFile {
  int fd;
  ~OpenFile() {
    if (fd >= 0) (void)close(fd);
  }
};

}  // namespace

JobFiles JobFiles::Create(const std::string& parent) {
  std::string dir = parent;
  if (dir.empty()) {
    const char* tmpdir = std::getenv("TMPDIR");
    dir = tmpdir != nullptr && tmpdir[0] != '\0' ? tmpdir : "/tmp";
  }
  std::string name = dir + "/pgq-worker.XXXXXX";
  // mkdtemp makes it mode 0700, with a name nobody could have guessed.
  if (mkdtemp(name.data()) == nullptr) {
    throw std::system_error(errno, std::generic_category(), "mkdtemp in " + dir);
  }
  return JobFiles(std::move(name));
}

JobFiles& JobFiles::operator=(JobFiles&& other) noexcept {
  if (this != &other) {
    (void)Remove();
    directory_ = std::exchange(other.directory_, {});
  }
  return *this;
}

std::vector<std::pair<std::string, std::string>> JobFiles::Environment() const {
  return {{"PGQ_RESULT_FILE", result_path()},
          {"PGQ_PROGRESS_FILE", progress_path()},
          {"PGQ_SNOOZE_FILE", snooze_path()}};
}

std::string JobFiles::Remove() {
  if (directory_.empty()) return {};
  std::error_code error;
  // Symbolic links the command left are removed, not followed.
  std::filesystem::remove_all(directory_, error);
  if (error) return "cannot remove " + directory_ + ": " + error.message();
  directory_.clear();
  return {};
}

FileContent ReadJobFile(const std::string& path, std::size_t max_bytes) {
  // O_NONBLOCK: opening a FIFO nobody writes to would otherwise hang the
  // worker's loop; such a file is then refused as not regular.
  OpenFile file{open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)};
  if (file.fd < 0) {
    if (errno == ENOENT) return {};  // the command did not write it
    return Rejected(std::string("cannot open it: ") + std::strerror(errno));
  }
  struct stat info;
  if (fstat(file.fd, &info) != 0) return Rejected(std::string("fstat: ") + std::strerror(errno));
  if (!S_ISREG(info.st_mode)) return Rejected("not a regular file");
  if (static_cast<unsigned long long>(info.st_size) > max_bytes) {
    return Rejected("larger than " + std::to_string(max_bytes) + " bytes");
  }
  std::string bytes;
  char buffer[65536];
  for (;;) {
    const ssize_t n = read(file.fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Rejected(std::string("cannot read it: ") + std::strerror(errno));
    if (n == 0) break;
    bytes.append(buffer, static_cast<std::size_t>(n));
    // Still being written since the fstat.
    if (bytes.size() > max_bytes) {
      return Rejected("larger than " + std::to_string(max_bytes) + " bytes");
    }
  }
  // Statements take text parameters as C strings: a NUL would cut it short.
  if (bytes.find('\0') != std::string::npos) return Rejected("it contains a NUL byte");
  FileContent content;
  content.text = Trimmed(bytes);
  if (!content.text.empty()) content.status = FileContent::Status::kText;
  return content;
}

}  // namespace pgq::cli
