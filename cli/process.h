// Running a job's command: fork/exec through posix_spawnp (no shell), its
// stdin and stderr on pipes the worker owns, in a process group of its own.
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "job_environment.h"

namespace pgq::cli {

// An owned file descriptor, closed once.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Close(); }

  int get() const { return fd_; }
  bool is_open() const { return fd_ >= 0; }
  void Close();

 private:
  int fd_ = -1;
};

struct SpawnedProcess {
  pid_t pid = -1;
  Fd stdin_fd;   // write end, non-blocking
  Fd stderr_fd;  // read end, non-blocking
};

// Starts argv[0] (searched in PATH when it has no slash) with `env` as its
// whole environment, stdout inherited. The child is the leader of a new
// process group, so a terminal's Ctrl-C (sent to the worker's group) does not
// reach it: the worker decides when to pass signals on. Its signal mask is
// empty and SIGPIPE, SIGINT, SIGTERM and SIGCHLD have their default action.
// Throws std::system_error when the command cannot be run.
SpawnedProcess Spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env);

// The environment for one job: the worker's own, with `set` set and the
// variables named in `removed` taken out (MergeEnvironment).
std::vector<std::string> JobEnvironment(const Variables& set,
                                        const std::vector<std::string>& removed);

// Whether `command` names something that can be run: an executable file,
// either as a path (with a slash) or in PATH.
bool IsRunnable(const std::string& command);

// The signal pipe: the handlers write one byte per signal, the event loop
// reads them (the classic self-pipe: poll() sees signals like any input).
class SignalPipe {
 public:
  // Installs the handlers for SIGCHLD, SIGTERM, SIGINT and SIGHUP (unless
  // SIGHUP is ignored, as under nohup) and ignores SIGPIPE (a command that
  // closes its stdin early is not an error).
  static SignalPipe Install();
  int read_fd() const { return read_.get(); }
  // The signals received since the last call, in order.
  std::vector<int> Drain();

 private:
  SignalPipe(Fd read_end, Fd write_end)
      : read_(std::move(read_end)), write_(std::move(write_end)) {}
  Fd read_;
  Fd write_;
};

}  // namespace pgq::cli
