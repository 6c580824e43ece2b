// detail::SshHostLoop: the I/O thread that owns one host's SSH connection and its channels.
//
// libssh sessions are not thread-safe, so everything that touches the session runs here: tasks
// posted by other threads, the channels' callbacks, keepalives, deadlines and the bytes written
// to channels' stdin. Each command runs in its own session channel and reports to an
// ExecHandler, on this thread only. Internal to SshProcessRunner; see ssh_process_runner.h for
// the contract the user sees.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include <pthread.h>

#include "mitra/common/status.h"
#include "launcher/process_runner.h"
#include "launcher/ssh_session.h"

struct ssh_event_struct;  // libssh's poll set

namespace mitra::launcher::detail {

using SteadyTime = std::chrono::steady_clock::time_point;

// How an exec channel ended.
struct ExecEnd {
  enum class Kind {
    kExited,    // the remote side reported the end; `exit` says how (lost: closed without it)
    kTimedOut,  // the handler's deadline passed; the channel was closed
    kLost,      // the connection was lost; `error` says why
    kShutdown,  // the runner is being destroyed
  };
  Kind kind = Kind::kExited;
  ExitStatus exit;
  Status error;
};

// Receives one channel's output and its end, on the I/O thread.
class ExecHandler {
 public:
  virtual ~ExecHandler() = default;
  virtual void OnOutput(std::string_view data, bool is_stderr) = 0;
  // Called once, last; the handler is destroyed right after.
  virtual void OnEnd(const ExecEnd& end) = 0;
  // When the command must have ended (or done something): OnEnd(kTimedOut) then. Asked anew
  // on every turn of the loop.
  virtual std::optional<SteadyTime> Deadline() const { return std::nullopt; }
};

// A signal's name as SSH's exit-signal and kill(1) spell it ("TERM"), or nullptr.
const char* SshSignalName(int signal_number);
// This machine's number for such a name, or 0.
int SignalFromSshName(std::string_view name);

struct ExecRecord;  // one open channel, its callbacks and what the remote reported

// What a channel's command gets on its standard input.
enum class ExecInput {
  kEmpty,  // EOF at once: a command that reads stdin ends its read instead of waiting
  kOpen,   // open until the channel closes; Write sends to it
};

// Called once, on the I/O thread, with how a Write ended.
using WriteDone = std::function<void(Status)>;

class SshHostLoop {
 public:
  using Task = std::function<void(SshHostLoop&)>;

  // Starts the thread; does not connect.
  explicit SshHostLoop(SshOptions options);
  // Stops the thread: tasks still queued run with stopping() true, open channels end with
  // kShutdown, then the connection is closed. Blocks until the thread has ended.
  ~SshHostLoop();

  SshHostLoop(const SshHostLoop&) = delete;
  SshHostLoop& operator=(const SshHostLoop&) = delete;

  // Any thread: runs `task` on the I/O thread, in posting order. Never blocks.
  void Post(Task task);

  // --- I/O thread only (inside a task or a handler) ---

  bool stopping() const { return stopping_; }
  const SshOptions& options() const { return options_; }
  // Connects when not connected (blocking). Errors as OpenSshSession.
  Status EnsureConnected();
  // Connects if needed and opens a channel running `command` (the remote login shell parses
  // it) with `input` as its stdin. On success `handler` receives the output and, once, the end;
  // on failure it is dropped without a call.
  Status Exec(const std::string& command, std::unique_ptr<ExecHandler> handler,
              ExecInput input = ExecInput::kEmpty);
  // Queues `data` for the stdin of the channel that `handler` (given to Exec with kOpen)
  // receives, after what is queued there already, and sends as much as the channel's window
  // takes; the rest goes out on the next turns of the loop, as the remote side reads. `done`
  // gets Ok once all of it was handed to the connection, or Unavailable, saying why, when the
  // channel has no open stdin, its command has exited, it ends first, or `deadline` passes
  // first. When the deadline passes after part of `data` went out, the channel's stdin is
  // closed (EOF): the reader sees the cut data end instead of running into the next.
  void Write(const ExecHandler* handler, std::string data, SteadyTime deadline, WriteDone done);

 private:
  void Run();
  static void* RunThread(void* loop);  // pthread entry: Run()
  void RunTasks();
  void Poll();
  void SendKeepalive();
  void Sweep();
  void FlushInput(ExecRecord& record);
  void ExpireInput(ExecRecord& record, SteadyTime now);
  void Lose(const std::string& why);
  void EndRecord(std::list<std::unique_ptr<ExecRecord>>::iterator it, const ExecEnd& end);
  int PollTimeoutMs() const;

  const SshOptions options_;
  const std::string description_;

  mutable std::mutex mu_;  // guards queue_ and stop_
  std::deque<Task> queue_;
  bool stop_ = false;

  // Owned by the I/O thread.
  int wake_fd_ = -1;                   // eventfd: Post writes it so that a poll returns
  ssh_event_struct* event_ = nullptr;  // the session and wake_fd_
  SshSessionPtr session_;
  std::list<std::unique_ptr<ExecRecord>> records_;
  SteadyTime next_keepalive_{};
  bool stopping_ = false;

  pthread_t thread_{};  // last: started when everything above exists
};

}  // namespace mitra::launcher::detail
