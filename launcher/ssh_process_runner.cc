#include "launcher/ssh_process_runner.h"

#include <future>
#include <map>

#include "common/clock.h"
#include "common/strings.h"
#include "contract/worker_messages.h"
#include "launcher/output_lines.h"
#include "launcher/shell_quote.h"
#include "launcher/ssh_host_loop.h"

namespace mitra::launcher {
namespace detail {

// A process whose start the remote shell has reported and whose end has not come.
struct RemoteProcess {
  int pid = 0;                           // on the host
  const ExecHandler* channel = nullptr;  // its channel, for SshHostLoop::Write
};

struct SshRunnerState {
  ProcessId next_id = 1;
  std::map<ProcessId, RemoteProcess> running;  // started and not yet ended
};

}  // namespace detail

namespace {

using detail::ExecEnd;
using detail::SteadyTime;

// The remote shell prints this line with its pid, then execs the program in its place.
constexpr std::string_view kPidMarker = "mitra-remote-pid ";

// Bytes of stderr kept to explain a start that failed before the program ran.
constexpr size_t kEarlyStderrBytes = 4096;

// One remote process: pid handshake, log, lines, messages, and its exit event.
class ProcessHandler : public detail::ExecHandler {
 public:
  ProcessHandler(ProcessId id, std::string what, std::unique_ptr<AppendableFile> log,
                 ProcessEventSink sink, size_t tail_lines, SteadyTime start_deadline,
                 std::shared_ptr<std::promise<Result<StartedProcess>>> started,
                 detail::SshRunnerState* state)
      : id_(id),
        what_(std::move(what)),
        log_(std::move(log)),
        sink_(std::move(sink)),
        tail_(tail_lines),
        start_deadline_(start_deadline),
        started_(std::move(started)),
        state_(state) {}

  void OnOutput(std::string_view data, bool is_stderr) override {
    if (is_stderr || !starting_) {
      Consume(data, is_stderr);
      return;
    }
    // Before the marker only the login shell speaks (rc files may print): log it as output.
    pending_.append(data);
    size_t newline;
    while (starting_ && (newline = pending_.find('\n')) != std::string::npos) {
      const std::string line = pending_.substr(0, newline);
      pending_.erase(0, newline + 1);
      std::optional<int64_t> pid;
      if (StartsWith(line, kPidMarker)) pid = ParseInt64(line.substr(kPidMarker.size()));
      if (pid && *pid > 0) {
        starting_ = false;
        state_->running[id_] = detail::RemoteProcess{static_cast<int>(*pid), this};
        started_->set_value(StartedProcess{id_, static_cast<int>(*pid)});
      } else {
        Consume(line + "\n", false);
      }
    }
    if (!starting_ || pending_.size() > kEarlyStderrBytes) {
      Consume(pending_, false);
      pending_.clear();
    }
  }

  void OnEnd(const ExecEnd& end) override {
    if (!pending_.empty()) Consume(pending_, false);
    if (starting_) {
      started_->set_value(StartError(end));
      return;
    }
    state_->running.erase(id_);
    if (end.kind == ExecEnd::Kind::kShutdown) return;  // no events once the runner is going
    stdout_lines_.Finish([this](std::string_view line) { OnLine(line); });
    stderr_lines_.Finish([this](std::string_view line) { OnLine(line); });
    log_.reset();
    ProcessEvent event;
    event.kind = ProcessEvent::Kind::kExited;
    event.id = id_;
    event.exit = end.exit;
    if (end.kind != ExecEnd::Kind::kExited) event.exit = ExitStatus{0, 0, true};
    if (end.kind == ExecEnd::Kind::kLost) tail_.Add("[mitra: " + end.error.message() + "]");
    event.last_lines = tail_.Lines();
    event.earlier_errors = tail_.EarlierErrors();
    sink_(std::move(event));
  }

  std::optional<SteadyTime> Deadline() const override {
    if (starting_) return start_deadline_;
    return std::nullopt;
  }

 private:
  Status StartError(const ExecEnd& end) const {
    switch (end.kind) {
      case ExecEnd::Kind::kExited: {
        std::string why = std::string(Trim(early_stderr_));
        if (why.empty()) why = "no error message";
        return Status::Unavailable("cannot start " + what_ + ": " + why + " (" +
                                   end.exit.ToString() + ")");
      }
      case ExecEnd::Kind::kTimedOut:
        return Status::Timeout("cannot start " + what_ + ": the remote shell did not report " +
                               "the pid in time");
      case ExecEnd::Kind::kLost:
        return end.error;
      case ExecEnd::Kind::kShutdown:
        break;
    }
    return Status::Aborted("cannot start " + what_ + ": the runner is shutting down");
  }

  void Consume(std::string_view data, bool is_stderr) {
    if (data.empty()) return;
    if (starting_ && is_stderr && early_stderr_.size() < kEarlyStderrBytes) {
      early_stderr_.append(data.substr(0, kEarlyStderrBytes - early_stderr_.size()));
    }
    if (log_) {
      const Status status = log_->Append(data);
      if (!status.ok()) {
        tail_.Add("[mitra: " + status.message() + "; the rest of the output is not logged]");
        log_.reset();
      }
    }
    LineSplitter& lines = is_stderr ? stderr_lines_ : stdout_lines_;
    lines.Feed(data, [this](std::string_view line) { OnLine(line); });
  }

  void OnLine(std::string_view line) {
    tail_.Add(line);
    if (!starting_ && StartsWith(line, contract::kMessagePrefix)) {
      ProcessEvent event;
      event.id = id_;
      event.message = std::string(line.substr(contract::kMessagePrefix.size()));
      sink_(std::move(event));
    }
  }

  const ProcessId id_;
  const std::string what_;  // "'program' on user@host:port"
  std::unique_ptr<AppendableFile> log_;
  ProcessEventSink sink_;
  LineSplitter stdout_lines_;
  LineSplitter stderr_lines_;
  LineTail tail_;
  const SteadyTime start_deadline_;
  std::shared_ptr<std::promise<Result<StartedProcess>>> started_;
  detail::SshRunnerState* state_;
  bool starting_ = true;  // until the pid marker
  std::string pending_;   // stdout before the marker, up to a newline
  std::string early_stderr_;
};

// A command whose output is collected for RunCommand.
class CommandHandler : public detail::ExecHandler {
 public:
  CommandHandler(std::string what, SteadyTime deadline, double timeout_s,
                 std::shared_ptr<std::promise<Result<CommandResult>>> done)
      : what_(std::move(what)),
        deadline_(deadline),
        timeout_s_(timeout_s),
        done_(std::move(done)) {}

  void OnOutput(std::string_view data, bool is_stderr) override {
    (is_stderr ? result_.err : result_.out).append(data);
  }

  void OnEnd(const ExecEnd& end) override {
    switch (end.kind) {
      case ExecEnd::Kind::kExited:
        if (end.exit.lost) {
          done_->set_value(Status::Unavailable(what_ + " ended without an exit status"));
          return;
        }
        result_.exit_code = end.exit.exit_code;
        result_.signal = end.exit.signal;
        done_->set_value(std::move(result_));
        return;
      case ExecEnd::Kind::kTimedOut:
        done_->set_value(
            Status::Timeout(what_ + " did not finish within " + std::to_string(timeout_s_) + " s"));
        return;
      case ExecEnd::Kind::kLost:
        done_->set_value(end.error);
        return;
      case ExecEnd::Kind::kShutdown:
        done_->set_value(Status::Aborted(what_ + " was stopped: the runner is shutting down"));
        return;
    }
  }

  std::optional<SteadyTime> Deadline() const override { return deadline_; }

 private:
  const std::string what_;
  const SteadyTime deadline_;
  const double timeout_s_;
  std::shared_ptr<std::promise<Result<CommandResult>>> done_;
  CommandResult result_;
};

}  // namespace

SshProcessRunner::SshProcessRunner(SshProcessRunnerOptions options, FileSystem* fs)
    : options_(std::move(options)),
      description_(DescribeHost(options_.ssh)),
      fs_(fs),
      state_(std::make_unique<detail::SshRunnerState>()),
      loop_(std::make_unique<detail::SshHostLoop>(options_.ssh)) {}

SshProcessRunner::~SshProcessRunner() { loop_.reset(); }

Status SshProcessRunner::Connect() {
  auto done = std::make_shared<std::promise<Status>>();
  std::future<Status> result = done->get_future();
  loop_->Post([done](detail::SshHostLoop& loop) { done->set_value(loop.EnsureConnected()); });
  return result.get();
}

Result<CommandResult> SshProcessRunner::Run(const std::string& command, double timeout_s) {
  auto done = std::make_shared<std::promise<Result<CommandResult>>>();
  std::future<Result<CommandResult>> result = done->get_future();
  const std::string what = "`" + command + "` on " + description_;
  loop_->Post([done, command, what, timeout_s](detail::SshHostLoop& loop) {
    if (Status status = loop.EnsureConnected(); !status.ok()) {
      done->set_value(status);
      return;
    }
    // The deadline counts from now: connecting is not the command's time.
    Status status = loop.Exec(
        command, std::make_unique<CommandHandler>(what, SteadyAfter(timeout_s), timeout_s, done));
    if (!status.ok()) done->set_value(status);
  });
  return result.get();
}

Result<CommandResult> SshProcessRunner::RunCommand(const std::vector<std::string>& argv,
                                                   double timeout_s) {
  Result<std::string> command = ShellCommandLine(argv);
  if (!command.ok()) return command.status();
  return Run(*command, timeout_s);
}

Result<std::string> SshProcessRunner::ResolveProgram(const std::string& program,
                                                     const std::string& search_path) {
  if (program.empty()) {
    return Status::InvalidArgument("the program name is empty; put the program after `--`");
  }
  // Exit 3: a directory, 4: missing, 5: not an executable file; else prints the absolute path.
  std::string script;
  const bool bare = program.find('/') == std::string::npos;
  if (bare) {
    if (!search_path.empty()) script = "PATH=" + ShellQuote(search_path) + "${PATH:+:$PATH}; ";
    script += "p=$(command -v " + ShellQuote(program) + ") || exit 4; ";
    script += "case $p in /*) ;; *) exit 4;; esac; ";
  } else {
    script = "p=" + ShellQuote(program) + "; [ -e \"$p\" ] || exit 4; ";
  }
  script +=
      "[ -d \"$p\" ] && exit 3; { [ -f \"$p\" ] && [ -x \"$p\" ]; } || exit 5; "
      "case $p in /*) ;; *) p=\"$(pwd)/$p\";; esac; printf '%s\\n' \"$p\"";
  Result<CommandResult> checked =
      RunCommand({"/bin/sh", "-c", script}, options_.ssh.connect_timeout_s);
  if (!checked.ok()) return checked.status();
  const std::string where = "program '" + program + "' on " + description_;
  switch (checked->signal == 0 ? checked->exit_code : -1) {
    case 0: {
      const std::vector<std::string> lines = LastLines(checked->out, 1);
      if (!lines.empty() && StartsWith(Trim(lines.back()), "/")) {
        return std::string(Trim(lines.back()));
      }
      break;
    }
    case 3:
      return Status::InvalidArgument(where +
                                     " is a directory; give the path of the executable "
                                     "in it");
    case 4:
      if (bare) {
        return Status::InvalidArgument(
            where + " was not found" + (search_path.empty() ? "" : " in " + search_path + " or") +
            " in the remote PATH; install it there or give its full path");
      }
      return Status::InvalidArgument(where +
                                     " does not exist (a relative path starts in the "
                                     "remote home directory); copy or build it there, or fix "
                                     "the path");
    case 5:
      return Status::InvalidArgument(where + " is not executable; run `chmod +x " + program +
                                     "` there or check that it is the right file");
    default:
      break;
  }
  return Status::Unavailable("cannot check " + where + ": " + std::string(Trim(checked->err)) +
                             " (exit code " + std::to_string(checked->exit_code) + ")");
}

Result<StartedProcess> SshProcessRunner::Start(const ProcessSpec& spec, ProcessEventSink sink) {
  std::vector<std::string> argv = {spec.program};
  argv.insert(argv.end(), spec.args.begin(), spec.args.end());
  Result<std::string> env_line = EnvCommandLineWithSecrets(spec.environment, spec.secrets, argv);
  if (!env_line.ok()) return env_line.status();
  Result<std::string> secret_lines = SecretLines(spec.environment, spec.secrets);
  if (!secret_lines.ok()) return secret_lines.status();
  std::string command;
  if (!spec.working_directory.empty()) {
    command = "cd " + ShellQuote(spec.working_directory) + " >/dev/null && ";
  }
  command += "echo \"" + std::string(kPidMarker) + "$$\" && exec " + *env_line;

  std::unique_ptr<AppendableFile> log;
  if (!spec.log_path.empty()) {
    Result<std::unique_ptr<AppendableFile>> opened = fs_->OpenForAppend(spec.log_path);
    if (!opened.ok()) return opened.status();
    log = std::move(opened).value();
  }
  auto started = std::make_shared<std::promise<Result<StartedProcess>>>();
  std::future<Result<StartedProcess>> result = started->get_future();
  auto shared_log = std::make_shared<std::unique_ptr<AppendableFile>>(std::move(log));
  loop_->Post(
      [this, started, command, shared_log, sink = std::move(sink), secrets = *secret_lines,
       what = "'" + spec.program + "' on " + description_](detail::SshHostLoop& loop) mutable {
        if (Status status = loop.EnsureConnected(); !status.ok()) {
          started->set_value(status);
          return;
        }
        const ProcessId id = state_->next_id++;
        auto handler = std::make_unique<ProcessHandler>(
            id, what, std::move(*shared_log), std::move(sink), options_.tail_lines,
            SteadyAfter(options_.start_timeout_s), started, state_.get());
        const ProcessHandler* channel = handler.get();
        Status status = loop.Exec(command, std::move(handler), detail::ExecInput::kOpen);
        if (!status.ok()) {
          started->set_value(status);
          return;
        }
        // The secrets' shell reads them first. A write that fails leaves it waiting for them,
        // as any read of stdin would: the manager's start timeout (no `starting` record) then
        // fails the worker; a write cut short closes the input, and the shell exits saying so.
        if (!secrets.empty()) {
          loop.Write(channel, std::move(secrets), SteadyAfter(options_.send_timeout_s), [](Status) {});
        }
      });
  return result.get();
}

Status SshProcessRunner::Signal(ProcessId id, int signal_number) {
  const char* name = detail::SshSignalName(signal_number);
  if (name == nullptr) {
    return Status::InvalidArgument("signal " + std::to_string(signal_number) +
                                   " cannot be sent to a remote process (no portable name)");
  }
  // Looking the pid up and sending the kill in one task: no exit is handled in between.
  auto done = std::make_shared<std::promise<Result<CommandResult>>>();
  std::future<Result<CommandResult>> result = done->get_future();
  loop_->Post([this, done, id, name](detail::SshHostLoop& loop) {
    auto it = state_->running.find(id);
    if (it == state_->running.end()) {
      if (id > 0 && id < state_->next_id) {
        done->set_value(CommandResult{});  // it has ended: nothing to signal
      } else {
        done->set_value(Status::Internal("no process with id " + std::to_string(id) +
                                         " was started on " + description_));
      }
      return;
    }
    const std::string command =
        "kill -s " + std::string(name) + " " + std::to_string(it->second.pid);
    Status status =
        loop.Exec(command, std::make_unique<CommandHandler>("`" + command + "` on " + description_,
                                                            SteadyAfter(options_.ssh.connect_timeout_s),
                                                            options_.ssh.connect_timeout_s, done));
    if (!status.ok()) done->set_value(status);
  });
  Result<CommandResult> killed = result.get();
  if (!killed.ok()) return killed.status();
  // A process that ended meanwhile is fine: its exit event is on its way.
  if (killed->ok() || killed->err.find("No such process") != std::string::npos) {
    return Status::Ok();
  }
  return Status::IoError("cannot send SIG" + std::string(name) + " to process " +
                         std::to_string(id) + " on " + description_ + ": " +
                         std::string(Trim(killed->err)));
}

Status SshProcessRunner::SendLine(ProcessId id, const std::string& line) {
  if (Status status = CheckSentLine(line); !status.ok()) return status;
  // The deadline counts from the call: time spent queued behind other work is the caller's too.
  const SteadyTime deadline = SteadyAfter(options_.send_timeout_s);
  auto done = std::make_shared<std::promise<Status>>();
  std::future<Status> result = done->get_future();
  loop_->Post([this, done, id, deadline, data = line + "\n"](detail::SshHostLoop& loop) mutable {
    const std::string what =
        "cannot send a line to process " + std::to_string(id) + " on " + description_;
    auto it = state_->running.find(id);
    if (it == state_->running.end()) {
      if (id > 0 && id < state_->next_id) {
        done->set_value(Status::Unavailable(what + ": it has exited"));
      } else {
        done->set_value(Status::Internal("no process with id " + std::to_string(id) +
                                         " was started on " + description_));
      }
      return;
    }
    loop.Write(
        it->second.channel, std::move(data), deadline,
        [done, what = what + " (pid " + std::to_string(it->second.pid) + ")"](Status status) {
          // Every way a write fails is Unavailable (the loop's, or a lost connection).
          done->set_value(status.ok() ? status
                                      : Status::Unavailable(what + ": " + status.message()));
        });
  });
  return result.get();
}

}  // namespace mitra::launcher
