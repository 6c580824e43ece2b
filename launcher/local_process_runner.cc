#include "launcher/local_process_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/process.hpp>
#include <boost/process/extend.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/duration_text.h"
#include "common/strings.h"
#include "contract/worker_messages.h"
#include "launcher/output_lines.h"

namespace mitra::launcher {

namespace bp = boost::process;

namespace detail {

struct LocalChild {
  ~LocalChild() {
    if (input_fd >= 0) ::close(input_fd);
  }

  // Called by the watcher once the process has exited. A SendLine waiting for room gives up
  // within a poll slice, so this waits that long at most.
  void CloseInput() {
    exited = true;
    std::lock_guard<std::mutex> lock(input_mu);
    if (input_fd >= 0) ::close(input_fd);
    input_fd = -1;
  }

  ProcessId id = 0;
  pid_t pid = 0;
  std::mutex mu;        // held while reaping and while signalling
  bool reaped = false;  // guarded by mu
  std::mutex input_mu;  // held while writing a line and while closing the input
  int input_fd = -1;    // guarded by input_mu: the write end of the stdin pipe; -1 once closed
  std::atomic<bool> exited{false};  // the watcher has seen the exit
  std::thread watcher;
};

}  // namespace detail

namespace {

// Boost.Process initializer: gives the child exactly `envp` (Boost's own environment class
// over-reads its strings in 1.74, so it is not used) and, in the child between fork and exec,
// sets up its process group and signals. Only async-signal-safe calls after the fork.
struct ChildSetup : bp::extend::handler {
  ChildSetup(pid_t parent, char** envp) : parent(parent), envp(envp) {}

  template <typename Executor>
  void on_setup(Executor& e) const {
    e.env = envp;
  }

  template <typename Executor>
  void on_exec_setup(Executor&) const {
    ::setpgid(0, 0);  // out of the terminal's foreground group: Ctrl-C is the manager's
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the manager died before prctl took effect
    // Start from a clean slate whatever the manager inherited (e.g. SIGINT ignored by `&`).
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (const int s : {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGPIPE}) {
      ::sigaction(s, &dfl, nullptr);
    }
  }

  pid_t parent;
  char** envp;  // null-terminated "NAME=value" strings, alive until the child has started
};

ExitStatus FromWaitStatus(int status) {
  ExitStatus exit;
  if (WIFSIGNALED(status)) {
    exit.signal = WTERMSIG(status);
  } else if (WIFEXITED(status)) {
    exit.exit_code = WEXITSTATUS(status);
  }
  return exit;
}

// Everything one watcher thread owns: the read end of the pipe, the log, the line state.
class Watcher {
 public:
  // Takes ownership of `fd` (the pipe's read end) and `log`. `child` must outlive Run().
  Watcher(detail::LocalChild* child, int fd, std::unique_ptr<AppendableFile> log,
          ProcessEventSink sink, const LocalProcessRunnerOptions& options)
      : child_(child),
        id_(child->id),
        pid_(child->pid),
        fd_(fd),
        log_(std::move(log)),
        sink_(std::move(sink)),
        tail_(options.tail_lines),
        poll_ms_(std::max(1, static_cast<int>(options.poll_interval_s * 1000))) {}

  void Run() {
    while (true) {
      pollfd p{fd_, POLLIN, 0};
      const int ready = ::poll(&p, 1, poll_ms_);
      if (ready < 0 && errno == EINTR) continue;
      if (ready < 0) break;
      if (ready == 0) {
        // Quiet pipe: the process may have exited while something it started holds the pipe.
        if (HasExited()) {
          DrainAvailable();
          break;
        }
        continue;
      }
      if (!ReadSome()) break;  // end of stream
    }
    ProcessEvent event;
    event.kind = ProcessEvent::Kind::kExited;
    event.id = id_;
    event.exit = Reap();
    child_->CloseInput();  // before kExited: once the manager knows, SendLine is Unavailable
    splitter_.Finish([this](std::string_view line) { OnLine(line); });
    ::close(fd_);
    log_.reset();
    event.last_lines = tail_.Lines();
    event.earlier_errors = tail_.EarlierErrors();
    sink_(std::move(event));
  }

 private:
  // false at end of stream or on a read error.
  bool ReadSome() {
    const ssize_t n = ::read(fd_, buffer_, sizeof(buffer_));
    if (n > 0) {
      Consume(std::string_view(buffer_, static_cast<size_t>(n)));
      return true;
    }
    return n < 0 && (errno == EINTR || errno == EAGAIN);
  }

  // Reads what is already in the pipe without waiting for more; bounded, because a
  // descendant of the process may keep writing forever.
  void DrainAvailable() {
    ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) | O_NONBLOCK);
    for (int i = 0; i < 64 && ReadSome(); ++i) {
    }
  }

  void Consume(std::string_view data) {
    if (log_) {
      const Status status = log_->Append(data);
      if (!status.ok()) {
        tail_.Add("[mitra: " + status.message() + "; the rest of the output is not logged]");
        log_.reset();
      }
    }
    splitter_.Feed(data, [this](std::string_view line) { OnLine(line); });
  }

  void OnLine(std::string_view line) {
    tail_.Add(line);
    if (StartsWith(line, contract::kMessagePrefix)) {
      ProcessEvent event;
      event.id = id_;
      event.message = std::string(line.substr(contract::kMessagePrefix.size()));
      sink_(std::move(event));
    }
  }

  bool HasExited() {
    siginfo_t info{};
    return ::waitid(P_PID, pid_, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid_;
  }

  // Waits for the exit without reaping (no lock held), then reaps under the lock Signal takes.
  ExitStatus Reap() {
    siginfo_t info{};
    while (::waitid(P_PID, pid_, &info, WEXITED | WNOWAIT) != 0 && errno == EINTR) {
    }
    std::lock_guard<std::mutex> lock(child_->mu);
    int status = 0;
    pid_t reaped = -1;
    do {
      reaped = ::waitpid(pid_, &status, 0);
    } while (reaped < 0 && errno == EINTR);
    child_->reaped = true;
    if (reaped != pid_) return ExitStatus{-1, 0};  // reaped elsewhere (SIGCHLD ignored?)
    return FromWaitStatus(status);
  }

  detail::LocalChild* child_;
  const ProcessId id_;
  const pid_t pid_;
  int fd_;
  std::unique_ptr<AppendableFile> log_;
  ProcessEventSink sink_;
  LineSplitter splitter_;
  LineTail tail_;
  int poll_ms_;
  char buffer_[64 * 1024];
};

// Blocks SIGPIPE in the calling thread for its lifetime, so that writing to a pipe nobody reads
// fails with EPIPE instead of killing the manager (a test binary or a tool embedding the runner
// does not ignore SIGPIPE as `mitra run` does). A write raises SIGPIPE in the writing thread only,
// so blocking it here is enough; Discard() takes back the one that a failed write left pending.
class SigpipeBlock {
 public:
  SigpipeBlock() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    ::pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
  }
  ~SigpipeBlock() { ::pthread_sigmask(SIG_SETMASK, &old_, nullptr); }

  SigpipeBlock(const SigpipeBlock&) = delete;
  SigpipeBlock& operator=(const SigpipeBlock&) = delete;

  // After a write failed with EPIPE: the SIGPIPE it raised is not delivered when the mask goes.
  void Discard() {
    if (was_pending_) return;  // someone else's: leave it
    sigset_t pending;
    sigpending(&pending);
    if (sigismember(&pending, SIGPIPE) != 1) return;
    const timespec zero{};
    while (::sigtimedwait(&pipe_, nullptr, &zero) < 0 && errno == EINTR) {
    }
  }

 private:
  sigset_t pipe_;
  sigset_t old_;
  bool was_pending_ = false;
};

// How long SendLine polls for room before it looks again whether the process has exited.
constexpr std::chrono::milliseconds kSendPollSlice(50);

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

}  // namespace

LocalProcessRunner::LocalProcessRunner(FileSystem* fs, LocalProcessRunnerOptions options)
    : fs_(fs), options_(options) {}

LocalProcessRunner::~LocalProcessRunner() {
  for (auto& [id, child] : children_) {
    std::lock_guard<std::mutex> lock(child->mu);
    if (!child->reaped) ::kill(child->pid, SIGKILL);
  }
  for (auto& [id, child] : children_) {
    if (child->watcher.joinable()) child->watcher.join();
  }
}

Result<std::string> LocalProcessRunner::ResolveProgram(const std::string& program,
                                                       const std::string& search_path) {
  if (program.empty()) {
    return Status::InvalidArgument("the program name is empty; put the program after `--`");
  }
  std::string path = program;
  if (program.find('/') == std::string::npos) {
    path.clear();
    size_t begin = 0;
    while (begin <= search_path.size() && path.empty()) {
      size_t end = search_path.find(':', begin);
      if (end == std::string::npos) end = search_path.size();
      const std::string dir = search_path.substr(begin, end - begin);
      const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + program;
      if (IsExecutableFile(candidate)) path = candidate;
      begin = end + 1;
    }
    if (path.empty()) {
      return Status::InvalidArgument("program '" + program +
                                     "' was not found on PATH; give its path instead, e.g. ./" +
                                     program);
    }
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    const int error = errno;
    if (error == ENOENT || error == ENOTDIR) {
      return Status::InvalidArgument("program '" + program + "' does not exist (looked in " +
                                     CurrentDirectory() + "); check the path or build it first");
    }
    return Status::InvalidArgument("cannot access program '" + program +
                                   "': " + std::strerror(error));
  }
  if (S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument("program '" + program +
                                   "' is a directory; give the path of the executable in it");
  }
  if (!S_ISREG(st.st_mode) || ::access(path.c_str(), X_OK) != 0) {
    return Status::InvalidArgument("program '" + program + "' is not executable; run `chmod +x " +
                                   path + "` or check that it is the right file");
  }
  if (path.front() != '/') {
    path = CurrentDirectory() + "/" + (StartsWith(path, "./") ? path.substr(2) : path);
  }
  return path;
}

Result<StartedProcess> LocalProcessRunner::Start(const ProcessSpec& spec, ProcessEventSink sink) {
  std::unique_ptr<AppendableFile> log;
  if (!spec.log_path.empty()) {
    Result<std::unique_ptr<AppendableFile>> opened = fs_->OpenForAppend(spec.log_path);
    if (!opened.ok()) return opened.status();
    log = std::move(opened).value();
  }
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {  // close-on-exec: no other child inherits this pipe
    return Status::IoError(std::string("cannot create a pipe: ") + std::strerror(errno));
  }
  bp::pipe pipe(fds[0], fds[1]);  // owns both ends from here on
  int in_fds[2];
  if (::pipe2(in_fds, O_CLOEXEC) != 0) {  // the child's stdin: the runner keeps the write end
    return Status::IoError(std::string("cannot create a pipe: ") + std::strerror(errno));
  }
  bp::pipe input(in_fds[0], in_fds[1]);
  std::vector<std::string> env_strings;
  for (const auto& [name, value] : spec.environment) env_strings.push_back(name + "=" + value);
  std::vector<char*> envp;
  for (std::string& entry : env_strings) envp.push_back(entry.data());
  envp.push_back(nullptr);
  const std::string directory = spec.working_directory.empty() ? "." : spec.working_directory;

  std::error_code error;
  bp::child child;
  try {
    // clang-format would read `std_in < null, ... > pipe` as template brackets.
    // clang-format off
    child = bp::child(bp::exe = spec.program, bp::args = spec.args, bp::std_in < input,
                      (bp::std_out & bp::std_err) > pipe, bp::start_dir = directory,
                      ChildSetup(::getpid(), envp.data()), error);
    // clang-format on
  } catch (const std::exception& e) {  // Boost reports some setup failures by throwing
    return Status::Unavailable("cannot start '" + spec.program + "': " + e.what());
  }
  if (error) {
    return Status::Unavailable("cannot start '" + spec.program + "': " + error.message());
  }
  child.detach();  // the watcher reaps it, not Boost
  const int read_fd = pipe.native_source();
  pipe.assign_source(-1);  // the watcher owns it now; the write end was closed by Boost
  const int input_fd = input.native_sink();
  input.assign_sink(-1);  // the child owns it now; Boost closed the read end here
  // Non-blocking: SendLine waits for room with poll, bounded, never in write().
  ::fcntl(input_fd, F_SETFL, ::fcntl(input_fd, F_GETFL) | O_NONBLOCK);

  auto owned = std::make_unique<detail::LocalChild>();
  detail::LocalChild* raw = owned.get();
  raw->pid = child.id();
  raw->input_fd = input_fd;
  {
    std::lock_guard<std::mutex> lock(mu_);
    raw->id = next_id_++;
    children_.emplace(raw->id, std::move(owned));
  }
  auto watcher = std::make_unique<Watcher>(raw, read_fd, std::move(log), std::move(sink), options_);
  raw->watcher = std::thread([w = std::move(watcher)] { w->Run(); });
  return StartedProcess{raw->id, static_cast<int>(raw->pid)};
}

Result<detail::LocalChild*> LocalProcessRunner::FindChild(ProcessId id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = children_.find(id);
  if (it == children_.end()) {
    return Status::Internal("no process with id " + std::to_string(id) + " was started here");
  }
  return it->second.get();
}

Status LocalProcessRunner::Signal(ProcessId id, int signal_number) {
  Result<detail::LocalChild*> found = FindChild(id);
  if (!found.ok()) return found.status();
  detail::LocalChild* child = *found;
  std::lock_guard<std::mutex> lock(child->mu);
  if (child->reaped) return Status::Ok();
  if (::kill(child->pid, signal_number) != 0 && errno != ESRCH) {
    return Status::IoError("cannot signal pid " + std::to_string(child->pid) + ": " +
                           std::strerror(errno));
  }
  return Status::Ok();
}

Status LocalProcessRunner::SendLine(ProcessId id, const std::string& line) {
  if (Status status = CheckSentLine(line); !status.ok()) return status;
  Result<detail::LocalChild*> found = FindChild(id);
  if (!found.ok()) return found.status();
  detail::LocalChild* child = *found;
  const std::string what =
      "process " + std::to_string(id) + " (pid " + std::to_string(child->pid) + ")";
  const std::string data = line + "\n";
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::microseconds(static_cast<int64_t>(std::max(0.0, options_.send_timeout_s) * 1e6));
  std::lock_guard<std::mutex> lock(child->input_mu);  // one line at a time, whole
  if (child->input_fd < 0) {
    return Status::Unavailable("cannot send a line to " + what +
                               (child->exited ? ": it has exited" : ": its input is closed"));
  }
  SigpipeBlock block_sigpipe;
  size_t written = 0;
  std::string failure;
  while (written < data.size()) {
    const ssize_t n = ::write(child->input_fd, data.data() + written, data.size() - written);
    if (n > 0) {
      written += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EPIPE) {
      block_sigpipe.Discard();
      failure = child->exited ? "it has exited" : "its standard input is closed";
      break;
    }
    if (n < 0 && errno != EAGAIN) {
      failure = std::string("cannot write to its standard input: ") + std::strerror(errno);
      break;
    }
    // The pipe is full: wait for the process to read, in slices, so that an exit is noticed.
    if (child->exited) {
      failure = "it has exited";
      break;
    }
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      failure =
          "it did not read its standard input for " + SecondsText(options_.send_timeout_s) + " s";
      break;
    }
    pollfd p{child->input_fd, POLLOUT, 0};
    ::poll(&p, 1, static_cast<int>(std::min(left, kSendPollSlice).count()));
  }
  if (failure.empty()) return Status::Ok();
  if (written > 0) {
    // Part of the line went out: close the input, so that the reader sees the cut line end in
    // EOF instead of running into the next line.
    ::close(child->input_fd);
    child->input_fd = -1;
    failure += " (" + std::to_string(written) + " of " + std::to_string(data.size()) +
               " bytes were written; its input is now closed)";
  }
  return Status::Unavailable("cannot send a line to " + what + ": " + failure);
}

}  // namespace mitra::launcher
