#include "process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <system_error>

extern char** environ;

namespace pgq::cli {

namespace {

// Written by the signal handler, which may only touch this.
volatile sig_atomic_t signal_write_fd = -1;

void OnSignal(int signo) {
  const int saved_errno = errno;
  const unsigned char byte = static_cast<unsigned char>(signo);
  // A full pipe drops the byte: SIGCHLD is only a nudge to reap, and a
  // stop signal already waiting there has the same effect.
  (void)!write(signal_write_fd, &byte, 1);
  errno = saved_errno;
}

std::system_error SystemError(const std::string& what) {
  return std::system_error(errno, std::generic_category(), what);
}

std::pair<Fd, Fd> MakePipe() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw SystemError("pipe");
  return {Fd(fds[0]), Fd(fds[1])};
}

void SetNonBlocking(const Fd& fd) {
  const int flags = fcntl(fd.get(), F_GETFL);
  if (flags < 0 || fcntl(fd.get(), F_SETFL, flags | O_NONBLOCK) != 0) {
    throw SystemError("fcntl");
  }
}

bool IsExecutableFile(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) && access(path.c_str(), X_OK) == 0;
}

// posix_spawn's attribute objects, destroyed on every path.
struct SpawnActions {
  posix_spawn_file_actions_t actions;
  SpawnActions() { posix_spawn_file_actions_init(&actions); }
  ~SpawnActions() { posix_spawn_file_actions_destroy(&actions); }
  SpawnActions(const SpawnActions&) = delete;
  SpawnActions& operator=(const SpawnActions&) = delete;
};

struct SpawnAttributes {
  posix_spawnattr_t attributes;
  SpawnAttributes() { posix_spawnattr_init(&attributes); }
  ~SpawnAttributes() { posix_spawnattr_destroy(&attributes); }
  SpawnAttributes(const SpawnAttributes&) = delete;
  SpawnAttributes& operator=(const SpawnAttributes&) = delete;
};

// argv/envp arrays pointing into strings that outlive the call.
std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  pointers.reserve(strings.size() + 1);
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

}  // namespace

Fd& Fd::operator=(Fd&& other) noexcept {
  if (this != &other) {
    Close();
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void Fd::Close() {
  if (fd_ >= 0) (void)close(fd_);
  fd_ = -1;
}

SpawnedProcess Spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  auto [stdin_read, stdin_write] = MakePipe();
  auto [stderr_read, stderr_write] = MakePipe();
  SpawnActions actions;
  // INVARIANT: fds 0-2 are open in the worker (main() makes sure), so the
  // pipe ends are 3 or above and the two dup2 below cannot clobber each other.
  posix_spawn_file_actions_adddup2(&actions.actions, stdin_read.get(), STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions.actions, stderr_write.get(), STDERR_FILENO);
  SpawnAttributes attributes;
  sigset_t none;
  sigemptyset(&none);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int signo : {SIGPIPE, SIGINT, SIGTERM, SIGCHLD}) sigaddset(&defaults, signo);
  posix_spawnattr_setflags(&attributes.attributes,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attributes.attributes, 0);
  posix_spawnattr_setsigmask(&attributes.attributes, &none);
  posix_spawnattr_setsigdefault(&attributes.attributes, &defaults);

  std::vector<std::string> argv_copy = argv;
  std::vector<std::string> env_copy = env;
  std::vector<char*> argv_pointers = CStrings(argv_copy);
  std::vector<char*> env_pointers = CStrings(env_copy);
  SpawnedProcess process;
  const int error = posix_spawnp(&process.pid, argv_pointers[0], &actions.actions,
                                 &attributes.attributes, argv_pointers.data(), env_pointers.data());
  if (error != 0) {
    throw std::system_error(error, std::generic_category(), "cannot run " + argv.front());
  }
  SetNonBlocking(stdin_write);
  SetNonBlocking(stderr_read);
  process.stdin_fd = std::move(stdin_write);
  process.stderr_fd = std::move(stderr_read);
  return process;  // the child's ends close here, in the worker
}

std::vector<std::string> JobEnvironment(const Variables& set,
                                        const std::vector<std::string>& removed) {
  std::vector<std::string> inherited;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    inherited.emplace_back(*entry);
  }
  return MergeEnvironment(inherited, set, removed);
}

bool IsRunnable(const std::string& command) {
  if (command.find('/') != std::string::npos) return IsExecutableFile(command);
  const char* path = std::getenv("PATH");
  const std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  std::size_t start = 0;
  for (;;) {
    const std::size_t end = dirs.find(':', start);
    std::string dir =
        dirs.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (dir.empty()) dir = ".";
    if (IsExecutableFile(dir + "/" + command)) return true;
    if (end == std::string::npos) return false;
    start = end + 1;
  }
}

SignalPipe SignalPipe::Install() {
  auto [read_end, write_end] = MakePipe();
  SetNonBlocking(read_end);
  SetNonBlocking(write_end);
  signal_write_fd = write_end.get();
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int signo : {SIGCHLD, SIGTERM, SIGINT, SIGHUP}) {
    struct sigaction previous = {};
    if (sigaction(signo, nullptr, &previous) != 0) throw SystemError("sigaction");
    // Started under nohup: SIGHUP stays ignored, for the commands too.
    if (signo == SIGHUP && previous.sa_handler == SIG_IGN) continue;
    if (sigaction(signo, &action, nullptr) != 0) throw SystemError("sigaction");
  }
  struct sigaction ignore = {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  if (sigaction(SIGPIPE, &ignore, nullptr) != 0) throw SystemError("sigaction");
  return SignalPipe(std::move(read_end), std::move(write_end));
}

std::vector<int> SignalPipe::Drain() {
  std::vector<int> signals;
  unsigned char buffer[64];
  for (;;) {
    const ssize_t n = read(read_.get(), buffer, sizeof buffer);
    if (n <= 0) break;  // EAGAIN: all read
    signals.insert(signals.end(), buffer, buffer + n);
  }
  return signals;
}

}  // namespace pgq::cli
