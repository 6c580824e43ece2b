#include "common/signal_watcher.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

namespace mitra {
namespace {

// The write end of the active watcher's self-pipe, for the handler; -1 when none is active.
std::atomic<int> g_write_fd{-1};

// Byte the destructor writes to wake the thread for good (0 is no signal number).
constexpr unsigned char kStopByte = 0;

extern "C" void OnSignal(int signal_number) {
  const int saved_errno = errno;
  const int fd = g_write_fd.load();
  if (fd >= 0) {
    const unsigned char byte = static_cast<unsigned char>(signal_number);
    // Non-blocking: if the pipe is full, signals are already pending and this one may go.
    [[maybe_unused]] const ssize_t n = ::write(fd, &byte, 1);
  }
  errno = saved_errno;
}

}  // namespace

Result<std::unique_ptr<SignalWatcher>> SignalWatcher::Start(const std::vector<int>& signals,
                                                            std::function<void(int)> on_signal) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return Status::IoError(std::string("cannot create the signal pipe: ") + std::strerror(errno));
  }
  ::fcntl(fds[1], F_SETFL, ::fcntl(fds[1], F_GETFL) | O_NONBLOCK);
  int expected = -1;
  if (!g_write_fd.compare_exchange_strong(expected, fds[1])) {
    ::close(fds[0]);
    ::close(fds[1]);
    return Status::Internal("a SignalWatcher is already active in this process");
  }
  std::unique_ptr<SignalWatcher> watcher(new SignalWatcher());
  watcher->read_fd_ = fds[0];
  watcher->write_fd_ = fds[1];
  watcher->on_signal_ = std::move(on_signal);
  watcher->thread_ = std::thread([w = watcher.get()] { w->Loop(); });
  for (const int signal_number : signals) {
    struct sigaction action {};
    action.sa_handler = OnSignal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    struct sigaction previous {};
    if (::sigaction(signal_number, &action, &previous) != 0) {
      return Status::IoError("cannot install a handler for " + SignalName(signal_number) + ": " +
                             std::strerror(errno));  // the destructor restores the others
    }
    watcher->previous_.emplace_back(signal_number, previous);
  }
  return watcher;
}

SignalWatcher::~SignalWatcher() {
  for (const auto& [signal_number, previous] : previous_) {
    ::sigaction(signal_number, &previous, nullptr);
  }
  g_write_fd.store(-1);
  const unsigned char stop = kStopByte;
  while (::write(write_fd_, &stop, 1) < 0 && errno == EINTR) {
  }
  if (thread_.joinable()) thread_.join();
  ::close(read_fd_);
  ::close(write_fd_);
}

void SignalWatcher::Loop() {
  while (true) {
    unsigned char byte = 0;
    const ssize_t n = ::read(read_fd_, &byte, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || byte == kStopByte) return;
    on_signal_(static_cast<int>(byte));
  }
}

std::string SignalName(int signal_number) {
  struct Entry {
    int number;
    const char* name;
  };
  static constexpr Entry kNames[] = {
      {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
      {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
      {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
      {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGCHLD, "SIGCHLD"},
      {SIGCONT, "SIGCONT"}, {SIGSTOP, "SIGSTOP"}, {SIGTSTP, "SIGTSTP"}, {SIGXCPU, "SIGXCPU"},
      {SIGXFSZ, "SIGXFSZ"}, {SIGSYS, "SIGSYS"},
  };
  for (const Entry& entry : kNames) {
    if (entry.number == signal_number) return entry.name;
  }
  return "signal " + std::to_string(signal_number);
}

}  // namespace mitra
