#include "launcher/ssh_host_loop.h"

#include <libssh/callbacks.h>
#include <libssh/libssh.h>
#include <libssh/server.h>  // ssh_send_keepalive: a global request any side may send
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <system_error>

namespace mitra::launcher::detail {
namespace {

// After the remote side reported the exit, how long to wait for the channel to close: a
// descendant of the process may hold its stdout open much longer.
constexpr std::chrono::milliseconds kExitGrace(500);

// RFC 4254's signal names, which are also kill(1)'s (`kill -s TERM`), and URG (a morph that
// holds the state in memory: worker/trainer.cc).
constexpr std::pair<const char*, int> kSignalNames[] = {
    {"ABRT", SIGABRT}, {"ALRM", SIGALRM}, {"BUS", SIGBUS},   {"CONT", SIGCONT}, {"FPE", SIGFPE},
    {"HUP", SIGHUP},   {"ILL", SIGILL},   {"INT", SIGINT},   {"KILL", SIGKILL}, {"PIPE", SIGPIPE},
    {"QUIT", SIGQUIT}, {"SEGV", SIGSEGV}, {"STOP", SIGSTOP}, {"SYS", SIGSYS},   {"TERM", SIGTERM},
    {"TRAP", SIGTRAP}, {"TSTP", SIGTSTP}, {"URG", SIGURG},   {"USR1", SIGUSR1}, {"USR2", SIGUSR2},
    {"XCPU", SIGXCPU}, {"XFSZ", SIGXFSZ}};

std::chrono::microseconds Seconds(double s) {
  return std::chrono::microseconds(static_cast<int64_t>(std::max(0.0, s) * 1e6));
}

void SetSessionTimeout(ssh_session session, double seconds) {
  const long whole = static_cast<long>(std::floor(seconds));
  const long micros = static_cast<long>((seconds - std::floor(seconds)) * 1e6);
  ssh_options_set(session, SSH_OPTIONS_TIMEOUT, &whole);
  ssh_options_set(session, SSH_OPTIONS_TIMEOUT_USEC, &micros);
}

}  // namespace

const char* SshSignalName(int signal_number) {
  for (const auto& [name, number] : kSignalNames) {
    if (number == signal_number) return name;
  }
  return nullptr;
}

int SignalFromSshName(std::string_view name) {
  for (const auto& [signal_name, number] : kSignalNames) {
    if (name == signal_name) return number;
  }
  return 0;
}

// Bytes on their way to a channel's stdin (one Write).
struct PendingInput {
  std::string data;
  size_t sent = 0;  // handed to libssh so far
  SteadyTime deadline;
  WriteDone done;
};

// One channel. Its callbacks run inside libssh calls on the I/O thread and only record.
struct ExecRecord {
  ssh_channel channel = nullptr;
  ssh_channel_callbacks_struct callbacks{};
  std::unique_ptr<ExecHandler> handler;
  bool closed = false;     // the remote side closed the channel
  bool exit_seen = false;  // exit-status or exit-signal arrived
  ExitStatus exit;
  SteadyTime exit_at{};
  bool input_open = false;         // ExecInput::kOpen, and no EOF sent since
  std::deque<PendingInput> input;  // oldest first; only the front has begun to go out
};

namespace {

// Ends every pending Write of `record` with `status` (not Ok).
void FailInput(ExecRecord& record, const Status& status) {
  std::deque<PendingInput> failed;
  failed.swap(record.input);
  for (PendingInput& pending : failed) pending.done(status);
}

// Closes the stdin of `record`'s command (EOF) and ends its pending Writes with `status`.
void CloseInput(ExecRecord& record, const Status& status) {
  if (record.input_open && !record.closed) ssh_channel_send_eof(record.channel);
  record.input_open = false;
  FailInput(record, status);
}

int OnData(ssh_session, ssh_channel, void* data, uint32_t len, int is_stderr, void* userdata) {
  auto* record = static_cast<ExecRecord*>(userdata);
  record->handler->OnOutput(std::string_view(static_cast<const char*>(data), len), is_stderr != 0);
  return static_cast<int>(len);
}

void OnClose(ssh_session, ssh_channel, void* userdata) {
  static_cast<ExecRecord*>(userdata)->closed = true;
}

void OnExitStatus(ssh_session, ssh_channel, int exit_status, void* userdata) {
  auto* record = static_cast<ExecRecord*>(userdata);
  record->exit_seen = true;
  record->exit.exit_code = exit_status;
  record->exit_at = std::chrono::steady_clock::now();
}

void OnExitSignal(ssh_session, ssh_channel, const char* signal, int, const char*, const char*,
                  void* userdata) {
  auto* record = static_cast<ExecRecord*>(userdata);
  record->exit_seen = true;
  record->exit.signal = SignalFromSshName(signal != nullptr ? signal : "");
  if (record->exit.signal == 0) record->exit.exit_code = -1;  // a signal we cannot name
  record->exit_at = std::chrono::steady_clock::now();
}

int OnWake(socket_t fd, int, void*) {
  uint64_t count = 0;
  while (::read(fd, &count, sizeof(count)) > 0) {
  }
  return 0;
}

// The I/O thread's stack. libssh's deepest path (the key exchange) needs a small part of it; a
// manager of 1,250 hosts reserves 640 MB of address space for them instead of 10 GB at the usual
// 8 MiB default (docs/performance.md, "Manager at scale").
constexpr size_t kIoThreadStackBytes = 512 * 1024;

}  // namespace

SshHostLoop::SshHostLoop(SshOptions options)
    : options_(std::move(options)), description_(DescribeHost(options_)) {
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  event_ = ssh_event_new();
  ssh_event_add_fd(event_, wake_fd_, POLLIN, OnWake, this);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, kIoThreadStackBytes);
  int rc = pthread_create(&thread_, &attr, &SshHostLoop::RunThread, this);
  pthread_attr_destroy(&attr);
  if (rc != 0) rc = pthread_create(&thread_, nullptr, &SshHostLoop::RunThread, this);
  if (rc != 0) {
    throw std::system_error(rc, std::generic_category(), "cannot start the SSH I/O thread");
  }
}

void* SshHostLoop::RunThread(void* loop) {
  static_cast<SshHostLoop*>(loop)->Run();
  return nullptr;
}

SshHostLoop::~SshHostLoop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t written = ::write(wake_fd_, &one, sizeof(one));
  pthread_join(thread_, nullptr);
  ssh_event_remove_fd(event_, wake_fd_);
  ssh_event_free(event_);
  ::close(wake_fd_);
}

void SshHostLoop::Post(Task task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
  }
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t written = ::write(wake_fd_, &one, sizeof(one));
}

void SshHostLoop::Run() {
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) break;
    }
    RunTasks();
    if (session_ && std::chrono::steady_clock::now() >= next_keepalive_) SendKeepalive();
    Poll();
    Sweep();
  }
  stopping_ = true;
  RunTasks();
  while (!records_.empty()) EndRecord(records_.begin(), {ExecEnd::Kind::kShutdown, {}, {}});
  if (session_) ssh_event_remove_session(event_, session_.get());
  session_.reset();
}

void SshHostLoop::RunTasks() {
  std::deque<Task> tasks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks.swap(queue_);
  }
  for (Task& task : tasks) task(*this);
}

void SshHostLoop::Write(const ExecHandler* handler, std::string data, SteadyTime deadline,
                        WriteDone done) {
  const auto it = std::find_if(records_.begin(), records_.end(),
                               [handler](const auto& r) { return r->handler.get() == handler; });
  if (it == records_.end()) {
    done(Status::Unavailable("its channel to " + description_ + " has closed"));
    return;
  }
  ExecRecord& record = **it;
  if (record.exit_seen || record.closed) {
    done(Status::Unavailable("it has exited"));
    return;
  }
  if (!record.input_open) {
    done(Status::Unavailable("its standard input is closed"));
    return;
  }
  record.input.push_back(PendingInput{std::move(data), 0, deadline, std::move(done)});
  FlushInput(record);
  ExpireInput(record, std::chrono::steady_clock::now());
}

// Sends what the remote window takes, never more: ssh_channel_write would otherwise wait in
// libssh, blocking every channel of the host, until the remote command reads. A window adjust
// from the remote side wakes the loop, which comes back here.
void SshHostLoop::FlushInput(ExecRecord& record) {
  while (record.input_open && !record.input.empty()) {
    PendingInput& front = record.input.front();
    const uint32_t window = ssh_channel_window_size(record.channel);
    if (window == 0) return;
    const size_t chunk = std::min<size_t>(window, front.data.size() - front.sent);
    const int n = ssh_channel_write(record.channel, front.data.data() + front.sent,
                                    static_cast<uint32_t>(chunk));
    if (n < 0) {
      CloseInput(record, Status::Unavailable(std::string("cannot write to its standard input: ") +
                                             ssh_get_error(session_.get())));
      return;
    }
    front.sent += static_cast<size_t>(n);
    if (front.sent < front.data.size()) {
      if (static_cast<size_t>(n) < chunk) return;  // libssh stopped short (a key exchange)
      continue;
    }
    WriteDone done = std::move(front.done);
    record.input.pop_front();
    done(Status::Ok());
  }
}

void SshHostLoop::ExpireInput(ExecRecord& record, SteadyTime now) {
  while (!record.input.empty() && now >= record.input.front().deadline) {
    PendingInput& front = record.input.front();
    if (front.sent > 0) {
      CloseInput(record, Status::Unavailable("it did not read its standard input in time (" +
                                             std::to_string(front.sent) + " of " +
                                             std::to_string(front.data.size()) +
                                             " bytes went out; its standard input is now closed)"));
      return;
    }
    WriteDone done = std::move(front.done);
    record.input.pop_front();
    done(Status::Unavailable("it did not read its standard input in time"));
  }
}

int SshHostLoop::PollTimeoutMs() const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!queue_.empty() || stop_) return 0;
  }
  const SteadyTime now = std::chrono::steady_clock::now();
  SteadyTime wake = now + std::chrono::seconds(1);
  if (session_) wake = std::min(wake, next_keepalive_);
  for (const auto& record : records_) {
    if (record->exit_seen) wake = std::min(wake, record->exit_at + kExitGrace);
    if (std::optional<SteadyTime> deadline = record->handler->Deadline()) {
      wake = std::min(wake, *deadline);
    }
    if (!record->input.empty()) wake = std::min(wake, record->input.front().deadline);
  }
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(wake - now).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 1000));
}

void SshHostLoop::Poll() {
  ssh_event_dopoll(event_, PollTimeoutMs());
  if (session_ && !ssh_is_connected(session_.get())) {
    Lose(std::string("the connection closed (") + ssh_get_error(session_.get()) + ")");
  }
}

// A keepalive asks for an answer and waits for it (the channels' data is still handled
// meanwhile), at most interval * count: an answer in time means the host is alive.
void SshHostLoop::SendKeepalive() {
  const double limit = options_.keepalive_interval_s * std::max(1, options_.keepalive_count);
  const SteadyTime start = std::chrono::steady_clock::now();
  SetSessionTimeout(session_.get(), limit);
  ssh_send_keepalive(session_.get());
  SetSessionTimeout(session_.get(), options_.connect_timeout_s);
  const SteadyTime end = std::chrono::steady_clock::now();
  next_keepalive_ = end + Seconds(options_.keepalive_interval_s);
  if (!ssh_is_connected(session_.get())) {
    Lose(std::string("the connection closed (") + ssh_get_error(session_.get()) + ")");
  } else if (end - start >= Seconds(limit * 0.95)) {
    Lose("no answer to keepalives for " + std::to_string(static_cast<int>(limit)) + " s");
  }
}

void SshHostLoop::Sweep() {
  const SteadyTime now = std::chrono::steady_clock::now();
  for (auto it = records_.begin(); it != records_.end();) {
    ExecRecord& record = **it;
    const auto next = std::next(it);
    if (!record.input.empty() && !record.closed && !record.exit_seen) {
      FlushInput(record);
      ExpireInput(record, now);
    }
    if (record.closed || (record.exit_seen && now >= record.exit_at + kExitGrace)) {
      ExecEnd end;
      end.exit = record.exit;
      end.exit.lost = !record.exit_seen;  // closed without saying how the command ended
      EndRecord(it, end);
    } else if (std::optional<SteadyTime> deadline = record.handler->Deadline();
               deadline && now >= *deadline) {
      EndRecord(it, {ExecEnd::Kind::kTimedOut, {}, {}});
    }
    it = next;
  }
}

void SshHostLoop::Lose(const std::string& why) {
  const Status error = Status::Unavailable("lost the connection to " + description_ + ": " + why);
  while (!records_.empty()) EndRecord(records_.begin(), {ExecEnd::Kind::kLost, {}, error});
  ssh_event_remove_session(event_, session_.get());
  session_.reset();
}

void SshHostLoop::EndRecord(std::list<std::unique_ptr<ExecRecord>>::iterator it,
                            const ExecEnd& end) {
  std::unique_ptr<ExecRecord> record = std::move(*it);
  records_.erase(it);
  switch (end.kind) {
    case ExecEnd::Kind::kExited:
      FailInput(*record, Status::Unavailable("it has exited"));
      break;
    case ExecEnd::Kind::kTimedOut:
      FailInput(*record, Status::Unavailable("its channel was closed"));
      break;
    case ExecEnd::Kind::kLost:
      FailInput(*record, end.error);
      break;
    case ExecEnd::Kind::kShutdown:
      FailInput(*record,
                Status::Unavailable("the runner for " + description_ + " is shutting down"));
      break;
  }
  ssh_remove_channel_callbacks(record->channel, &record->callbacks);
  if (session_ && ssh_is_connected(session_.get()) && !record->closed) {
    ssh_channel_close(record->channel);
  }
  ssh_channel_free(record->channel);
  record->handler->OnEnd(end);
}

Status SshHostLoop::EnsureConnected() {
  if (session_) return Status::Ok();
  if (stopping_) return Status::Aborted("the runner for " + description_ + " is shutting down");
  Result<SshSessionPtr> opened = OpenSshSession(options_);
  if (!opened.ok()) return opened.status();
  session_ = std::move(opened).value();
  ssh_event_add_session(event_, session_.get());
  next_keepalive_ = std::chrono::steady_clock::now() + Seconds(options_.keepalive_interval_s);
  return Status::Ok();
}

Status SshHostLoop::Exec(const std::string& command, std::unique_ptr<ExecHandler> handler,
                         ExecInput input) {
  if (Status status = EnsureConnected(); !status.ok()) return status;
  auto record = std::make_unique<ExecRecord>();
  record->handler = std::move(handler);
  record->channel = ssh_channel_new(session_.get());
  if (record->channel == nullptr) {
    return Status::Internal("libssh cannot allocate a channel for " + description_);
  }
  ssh_callbacks_init(&record->callbacks);
  record->callbacks.userdata = record.get();
  record->callbacks.channel_data_function = OnData;
  record->callbacks.channel_close_function = OnClose;
  record->callbacks.channel_exit_status_function = OnExitStatus;
  record->callbacks.channel_exit_signal_function = OnExitSignal;
  std::string failure;
  if (ssh_channel_open_session(record->channel) != SSH_OK) {
    failure = std::string("cannot open a session on ") + description_ + ": " +
              ssh_get_error(session_.get()) + " (sshd's MaxSessions may be reached)";
  } else if (ssh_set_channel_callbacks(record->channel, &record->callbacks) != SSH_OK ||
             ssh_channel_request_exec(record->channel, command.c_str()) != SSH_OK) {
    failure = std::string("cannot run a command on ") + description_ + ": " +
              ssh_get_error(session_.get());
  }
  if (!failure.empty()) {
    ssh_remove_channel_callbacks(record->channel, &record->callbacks);
    ssh_channel_free(record->channel);
    if (!ssh_is_connected(session_.get())) Lose("the connection closed");
    return Status::Unavailable(failure);
  }
  if (input == ExecInput::kEmpty) {
    ssh_channel_send_eof(record->channel);
  } else {
    record->input_open = true;  // EOF only when the channel closes (or a Write is cut short)
  }
  records_.push_back(std::move(record));
  return Status::Ok();
}

}  // namespace mitra::launcher::detail
