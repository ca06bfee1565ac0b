// What pgq-worker and pgq-relay share around their Main: exit statuses,
// the "program: message" error line, a usage error's hint, standard
// descriptors made safe, and the last catch before main returns.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "pq.h"

namespace pgq::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;

inline void PrintError(const char* program, const std::string& message) {
  std::fprintf(stderr, "%s: %s\n", program, message.c_str());
}

// One log line, "program: line", written whole to stderr with write(2)
// (not stdio: a daemon's lines under systemd must not interleave or wait in
// a buffer).
// Writes all of `bytes` to stderr; a stderr nobody reads is not worth
// failing for (what could not be written is dropped).
inline void WriteStderr(const char* bytes, std::size_t size) {
  while (size > 0) {
    const ssize_t n = write(STDERR_FILENO, bytes, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    bytes += n;
    size -= static_cast<std::size_t>(n);
  }
}

inline void LogLine(const char* program, const std::string& line) {
  const std::string text = std::string(program) + ": " + line + "\n";
  WriteStderr(text.data(), text.size());
}

// "SIGTERM", "SIGINT", "SIGHUP", else "signal": for the stop line.
inline const char* SignalName(int signo) {
  switch (signo) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGHUP:
      return "SIGHUP";
    default:
      return "signal";
  }
}

// The message, then how to get help; the usage error's exit status.
inline int UsageError(const char* program, const std::string& message) {
  PrintError(program, message);
  std::fprintf(stderr, "Try '%s --help'.\n", program);
  return kExitUsage;
}

// A closed stdin, stdout or stderr would make the next file opened take its
// number, and a command's pipes or a log line could then land on the wrong
// one: each closed one is opened on /dev/null.
inline void OpenStandardFds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (fcntl(fd, F_GETFD) == -1 && errno == EBADF) (void)open("/dev/null", O_RDWR);
  }
}

// main's body: run(args) with the arguments after the program name; a
// DbError or other exception that reaches here is printed and exits 1.
template <typename Run>
int RunProgram(const char* program, int argc, char** argv, Run run) {
  OpenStandardFds();
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const DbError& e) {
    PrintError(program, e.Describe());
  } catch (const std::exception& e) {
    PrintError(program, std::string("error: ") + e.what());
  }
  return kExitError;
}

}  // namespace pgq::cli
