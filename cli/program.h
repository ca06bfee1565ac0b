// What pgq-worker and pgq-relay share around their Main: exit statuses,
// the "program: message" error line, a usage error's hint, standard
// descriptors made safe, and the last catch before main returns.
#pragma once

#include <fcntl.h>
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
