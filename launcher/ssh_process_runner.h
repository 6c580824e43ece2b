// SshProcessRunner: runs processes on one remote host over SSH (libssh).
//
// One runner per host: it keeps one SSH connection and runs each process in its own session
// channel, as `sh -c` would run `cd DIR && exec env -i NAME=value... PROGRAM ARGS...` on the
// host (every word single-quoted: nothing in the spec reaches the shell as syntax). The remote
// login shell must be POSIX (sh, bash, dash, zsh). Each process's stdout and stderr stream back:
// every byte goes to the spec's local log file, `@mitra` lines become kMessage events, and
// kExited reports the exit code, the signal (SSH exit-signal), or `lost`.
//
// Standard input. A process's stdin is its channel's, kept open until the channel closes (no
// pty is asked for): `exec` hands the remote shell's stdin to the program, and SendLine writes
// to it. A program that reads stdin to its end now waits instead of seeing EOF at once, and so
// would a command in the remote login shell's rc files that reads stdin. RunCommand's commands
// get EOF at once, as before.
//
// Connection. Connect() opens it (blocking); every other call opens it first when there is
// none, and after a loss the next call opens a new one. A health check is Connect() then
// RunCommand({"true"}). While connected a keepalive goes out every keepalive_interval_s; when
// keepalive_count go unanswered, or the socket fails or closes (sshd killed, host rebooted),
// every process still running on the host gets kExited with `lost` set, within about
// keepalive_interval_s * keepalive_count. What became of such a process is unknown: it may run
// on, without its stdout (its next write then fails).
//
// Threading. All methods are thread-safe. One I/O thread per runner owns the libssh session and
// every channel (libssh sessions are not thread-safe); a call posts a request to it and blocks
// until it is answered. Connecting and logging in block that thread (up to about
// connect_timeout_s per step), and so does an unanswered keepalive (up to
// keepalive_interval_s * keepalive_count), so every call on this runner waits for them. Sinks
// are called on the I/O thread: a slow sink delays every process of this host.
//
// Limits. sshd's MaxSessions (default 10) bounds the processes and commands running at once on
// one connection; past it, Start and RunCommand fail with Unavailable.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/file_system.h"
#include "launcher/process_runner.h"
#include "launcher/ssh_session.h"

namespace mitra::launcher {
namespace detail {
class SshHostLoop;      // the I/O thread and everything it owns
struct SshRunnerState;  // the running processes' remote pids; touched on the I/O thread only
}  // namespace detail

struct SshProcessRunnerOptions {
  SshOptions ssh;
  double start_timeout_s = 10;  // how long Start waits for the remote shell to report the pid
  double send_timeout_s = kSendLineTimeoutS;  // SendLine's wait for the process to read
  size_t tail_lines = 20;       // lines kept for ProcessEvent::last_lines
};

class SshProcessRunner : public ProcessRunner {
 public:
  // Starts the I/O thread; does not connect. `fs` opens the log files and must outlive the
  // runner.
  SshProcessRunner(SshProcessRunnerOptions options, FileSystem* fs);
  // Closes every channel and the connection and joins the I/O thread. Remote processes are not
  // signalled: they lose their stdout and stderr and run on until they write or end (kill them
  // first with Signal if they must stop). No sink is called after the destructor returns, and
  // processes still running get no kExited.
  ~SshProcessRunner() override;

  SshProcessRunner(const SshProcessRunner&) = delete;
  SshProcessRunner& operator=(const SshProcessRunner&) = delete;

  // Opens the connection when there is none: connects, checks the host key, logs in. Blocks up
  // to about 3 * connect_timeout_s. Errors as detail::OpenSshSession: Unavailable when the host
  // cannot be reached, InvalidArgument when it refuses us (host key, keys) with what to do.
  Status Connect();

  // Checked on the host: a path must name an executable regular file there (a relative one is
  // taken from the remote home directory); a bare name is looked up in `search_path`, then in
  // the remote login PATH. Returns the absolute remote path. InvalidArgument naming the host and
  // the fix when it is missing or not executable; connection errors as Connect().
  Result<std::string> ResolveProgram(const std::string& program,
                                     const std::string& search_path) override;

  // Returns once the remote shell has reported the program's pid (the remote pid: the shell
  // execs env, which execs the program). An empty working_directory means the remote login
  // directory. A start that fails on the host (missing directory, no shell) returns
  // Unavailable with the host's stderr and delivers no event; no pid within start_timeout_s
  // returns Timeout. InvalidArgument for a spec that cannot be quoted safely (bad variable
  // name, NUL byte). Blocks up to connect + start_timeout_s.
  Result<StartedProcess> Start(const ProcessSpec& spec, ProcessEventSink sink) override;

  // Runs `kill -s NAME PID` on the host for exactly that remote pid, in a separate channel.
  // Ok and nothing sent when the process has already exited. Blocks up to connect plus a round
  // trip (at most connect_timeout_s).
  Status Signal(ProcessId id, int signal_number) override;

  bool CanSendLines() const override { return true; }
  // Hands the line and its newline to the I/O thread, which writes them to the process's
  // channel as the remote window allows, after the lines sent before, and returns how that
  // ended: Ok once all of it went to the connection (not necessarily read yet); Unavailable,
  // naming the process and the host, when it has exited, the connection is lost, or the remote
  // side did not take it all within send_timeout_s of the call. When that wait runs out after
  // part of the line went out, the process's stdin is closed (EOF), so that the cut line never
  // runs into the next one, and every later SendLine to it is Unavailable. Blocks up to
  // send_timeout_s, plus whatever the I/O thread is busy with (connecting, a keepalive).
  Status SendLine(ProcessId id, const std::string& line) override;

  // Runs argv on the host (quoted like Start; the remote login environment and directory) and
  // collects its exit and output, kept in memory. Timeout when it has not ended after
  // `timeout_s` (its channel is closed; the command is not signalled); Unavailable when the
  // connection is lost meanwhile. Blocks up to connect + timeout_s.
  Result<CommandResult> RunCommand(const std::vector<std::string>& argv, double timeout_s);

  // "user@host:port", for messages.
  const std::string& host_description() const { return description_; }

 private:
  // Runs `command` in a channel to completion (or `timeout_s`), on the I/O thread.
  Result<CommandResult> Run(const std::string& command, double timeout_s);

  const SshProcessRunnerOptions options_;
  const std::string description_;
  FileSystem* fs_;
  std::unique_ptr<detail::SshRunnerState> state_;  // outlives loop_, whose handlers use it
  std::unique_ptr<detail::SshHostLoop> loop_;
};

}  // namespace mitra::launcher
