#include "launcher/srun_process_runner.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <utility>

#include "common/duration_text.h"
#include "common/json.h"
#include "common/strings.h"
#include "launcher/shell_quote.h"

namespace mitra::launcher {

namespace detail {

struct SrunStep {
  std::mutex mu;
  std::condition_variable changed;
  std::optional<SrunTask> task;         // guarded by mu: set once the task reported
  bool exited = false;                  // guarded by mu
  bool abandoned = false;               // guarded by mu: Start gave up on it; deliver nothing
  ExitStatus exit;                      // guarded by mu: srun's exit, translated
  std::vector<std::string> last_lines;  // guarded by mu
  ProcessEventSink sink;
};

}  // namespace detail

namespace {

constexpr std::string_view kTaskEvent = "srun_task";

// Prints the step and the pid as a message, then execs its arguments. $$ stays the program's
// pid: sh execs env, which execs the program.
constexpr const char* kReportThenExec =
    "printf '@mitra {\"event\":\"srun_task\",\"step\":\"%s.%s\",\"pid\":%s}\\n' "
    "\"$SLURM_JOB_ID\" \"$SLURM_STEP_ID\" \"$$\"; exec \"$@\"";

// The same, with the values of `secrets` on the program's standard input (a here-document the
// shell expands from the task's own environment, where srun --export=ALL carried them from
// srun's), for SecretReader to read: the values are on no command line. (dash passes a
// here-document through a pipe; bash before 5.1 through a temporary file of mode 0600 in
// $TMPDIR, removed at once.)
std::string ReportThenExecWithSecrets(const std::vector<std::string>& secrets) {
  std::string heredoc;
  for (const std::string& name : secrets) heredoc += "$" + name + "\n";
  return std::string(kReportThenExec) + " <<MITRA_SECRETS\n" + heredoc + "MITRA_SECRETS\n";
}

// Kills $2 when its environment holds MITRA_RUN_DIR=$1: a worker of that run, not a reused pid.
constexpr const char* kKillIfWorker =
    "grep -qzx \"MITRA_RUN_DIR=$1\" \"/proc/$2/environ\" 2>/dev/null || exit 0; "
    "kill -KILL \"$2\"";

bool HoldsByte(std::string_view text, char c) { return text.find(c) != std::string_view::npos; }

std::string LastLinesText(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines) {
    if (Trim(line).empty()) continue;
    if (!text.empty()) text += "; ";
    text += std::string(Trim(line));
  }
  return text.empty() ? "no output" : text;
}

}  // namespace

std::vector<std::string> SrunArguments(const SrunOptions& options,
                                       const std::string& working_directory,
                                       const std::vector<std::string>& command) {
  std::vector<std::string> args{"--jobid=" + options.job_id, "--nodes=1", "--ntasks=1",
                                "--nodelist=" + options.node, "--overlap",
                                // sbatch --export=NONE would otherwise reach the steps through
                                // SLURM_EXPORT_ENV and leave the task without PATH.
                                "--export=ALL", "--input=none"};
  if (!working_directory.empty()) args.push_back("--chdir=" + working_directory);
  args.push_back("--");
  args.insert(args.end(), command.begin(), command.end());
  return args;
}

Result<std::vector<std::string>> SrunTaskCommand(const ProcessSpec& spec) {
  if (HoldsByte(spec.program, '=') || HoldsByte(spec.program, '\0')) {
    return Status::InvalidArgument("program '" + spec.program +
                                   "' holds '=' or a NUL byte, which `env` cannot run under "
                                   "srun; rename it or its directory");
  }
  std::vector<std::string> secrets;
  for (const std::string& name : spec.secrets) {
    if (!spec.environment.count(name)) continue;
    if (!IsValidEnvironmentName(name)) {
      return Status::InvalidArgument("secret '" + name + "' is not a valid variable name");
    }
    secrets.push_back(name);
  }
  const std::string script =
      secrets.empty() ? std::string(kReportThenExec) : ReportThenExecWithSecrets(secrets);
  std::vector<std::string> command{"/bin/sh", "-c", script, "mitra-srun", "env", "-i"};
  for (const auto& [name, value] : spec.environment) {
    if (std::find(secrets.begin(), secrets.end(), name) != secrets.end()) continue;
    if (name.empty() || HoldsByte(name, '=') || HoldsByte(name, '\0') || HoldsByte(value, '\0')) {
      return Status::InvalidArgument("environment variable '" + name +
                                     "' cannot be passed to a process: a name must be non-empty "
                                     "and without '=', and neither may hold a NUL byte");
    }
    command.push_back(name + "=" + value);
  }
  if (!secrets.empty()) {
    const std::vector<std::string> reader = SecretReader(secrets);
    command.insert(command.end(), reader.begin(), reader.end());
  }
  command.push_back(spec.program);
  command.insert(command.end(), spec.args.begin(), spec.args.end());
  return command;
}

std::optional<SrunTask> ParseSrunTaskMessage(std::string_view message) {
  Result<JsonObject> json = JsonObject::Parse(message);
  if (!json.ok() || json->GetString("event") != std::string(kTaskEvent)) return std::nullopt;
  const std::optional<std::string> step = json->GetString("step");
  const std::optional<double> pid = json->GetNumber("pid");
  if (!step || !pid || *pid <= 0) return std::nullopt;
  return SrunTask{*step, static_cast<int64_t>(*pid)};
}

ExitStatus TaskExitFromSrun(const ExitStatus& srun, const std::vector<std::string>& last_lines) {
  ExitStatus exit = srun;
  // srun itself killed (not by us: we signal steps, not srun): the task's fate is unknown.
  if (srun.signal != 0) {
    exit.lost = true;
    return exit;
  }
  bool task_signalled = false;
  for (const std::string& line : last_lines) {
    if (!StartsWith(line, "srun: error: ")) continue;
    if (line.find("Node failure on") != std::string::npos) exit.lost = true;
    const size_t task = line.find(": task 0: ");
    if (task != std::string::npos &&
        line.find("Exited with exit code", task) == std::string::npos) {
      task_signalled = true;
    }
  }
  if (exit.lost) return exit;
  if (task_signalled && srun.exit_code > 128 && srun.exit_code < 128 + 65) {
    exit.signal = srun.exit_code - 128;
    exit.exit_code = 0;
  }
  return exit;
}

SrunProcessRunner::SrunProcessRunner(SrunOptions options, ProcessRunner* local,
                                     LocalCommandFunction command)
    : options_(std::move(options)), local_(local), command_(std::move(command)) {}

SrunProcessRunner::~SrunProcessRunner() = default;

Result<std::string> SrunProcessRunner::ResolveProgram(const std::string& program,
                                                      const std::string& search_path) {
  return local_->ResolveProgram(program, search_path);
}

Result<std::string> SrunProcessRunner::Srun() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!srun_.empty()) return srun_;
  const auto path = options_.environment.find("PATH");
  Result<std::string> found =
      local_->ResolveProgram("srun", path == options_.environment.end() ? "" : path->second);
  if (!found.ok()) {
    return Status::InvalidArgument(
        "srun was not found on PATH: --launcher srun needs Slurm's "
        "client commands (Debian: apt-get install slurm-client)");
  }
  srun_ = *found;
  return srun_;
}

Result<StartedProcess> SrunProcessRunner::Start(const ProcessSpec& spec, ProcessEventSink sink) {
  Result<std::string> srun = Srun();
  if (!srun.ok()) return srun.status();
  Result<std::vector<std::string>> task = SrunTaskCommand(spec);
  if (!task.ok()) return task.status();
  ProcessSpec local;
  local.program = *srun;
  local.args = SrunArguments(options_, spec.working_directory, *task);
  local.environment = options_.environment;
  // The secrets reach the task in srun's own environment (--export=ALL), which only its user
  // can read, not on srun's command line.
  for (const std::string& name : spec.secrets) {
    if (auto it = spec.environment.find(name); it != spec.environment.end()) {
      local.environment[name] = it->second;
    }
  }
  local.log_path = spec.log_path;

  auto step = std::make_shared<detail::SrunStep>();
  step->sink = std::move(sink);
  Result<StartedProcess> started = local_->Start(local, [step](ProcessEvent event) {
    std::unique_lock<std::mutex> lock(step->mu);
    if (event.kind == ProcessEvent::Kind::kMessage) {
      if (!step->task) {
        if (std::optional<SrunTask> reported = ParseSrunTaskMessage(event.message)) {
          step->task = std::move(reported);
          step->changed.notify_all();
          return;
        }
      }
      if (step->abandoned || !step->task) return;
      lock.unlock();  // the sink is the caller's: never under our lock
      step->sink(std::move(event));
      return;
    }
    event.exit = TaskExitFromSrun(event.exit, event.last_lines);
    step->exited = true;
    step->exit = event.exit;
    step->last_lines = event.last_lines;
    step->changed.notify_all();
    // A step that never reported is Start's to report (as an error), not the sink's.
    if (step->abandoned || !step->task) return;
    lock.unlock();
    step->sink(std::move(event));
  });
  if (!started.ok()) return started.status();

  std::unique_lock<std::mutex> lock(step->mu);
  const bool settled =
      step->changed.wait_for(lock, std::chrono::duration<double>(options_.start_timeout_s),
                             [&step] { return step->task.has_value() || step->exited; });
  if (!step->task) {
    step->abandoned = true;
    if (!settled) {
      lock.unlock();
      // srun answers SIGTERM by ending its step: nothing is left on the node.
      (void)local_->Signal(started->id, SIGTERM);
      return Status::Timeout("srun did not start '" + spec.program + "' on " + options_.node +
                             " within " + SecondsText(options_.start_timeout_s) +
                             " s (is the allocation's node busy or down? `scontrol show node " +
                             options_.node + "`)");
    }
    return Status::Unavailable("srun could not start '" + spec.program + "' on " + options_.node +
                               ": it " + step->exit.ToString() + " (" +
                               LastLinesText(step->last_lines) + ")");
  }
  const int64_t pid = step->task->pid;
  lock.unlock();
  {
    std::lock_guard<std::mutex> runner_lock(mu_);
    steps_[started->id] = step;
  }
  return StartedProcess{started->id, static_cast<int>(pid)};
}

Status SrunProcessRunner::Signal(ProcessId id, int signal_number) {
  std::shared_ptr<detail::SrunStep> step;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = steps_.find(id);
    if (it == steps_.end()) {
      return Status::Internal("no process with id " + std::to_string(id) + " was started here");
    }
    step = it->second;
  }
  std::string name;
  {
    std::lock_guard<std::mutex> lock(step->mu);
    if (step->exited) return Status::Ok();
    name = step->task->step;
  }
  Result<CommandResult> sent =
      command_({"scancel", "--signal=" + std::to_string(signal_number), name}, options_.environment,
               options_.command_timeout_s);
  if (sent.ok() && sent->ok()) return Status::Ok();
  {
    std::lock_guard<std::mutex> lock(step->mu);
    if (step->exited) return Status::Ok();  // it ended meanwhile: nothing left to signal
  }
  const std::string why = !sent.ok() ? sent.status().message()
                                     : std::string(Trim(sent->err.empty() ? sent->out : sent->err));
  return Status::Unavailable("cannot signal step " + name + " on " + options_.node +
                             " (scancel: " + why + ")");
}

Status SrunProcessRunner::Check(double timeout_s) {
  Result<std::string> srun = Srun();
  if (!srun.ok()) return srun.status();
  std::vector<std::string> argv{*srun};
  for (std::string& a : SrunArguments(options_, "", {"true"})) argv.push_back(std::move(a));
  Result<CommandResult> result = command_(argv, options_.environment, timeout_s);
  if (!result.ok()) {
    return Status::Unavailable("`srun true` on " + options_.node + ": " +
                               result.status().message());
  }
  if (!result->ok()) {
    return Status::Unavailable("`srun true` failed on " + options_.node + ": " +
                               (Trim(result->err).empty()
                                    ? "exit code " + std::to_string(result->exit_code)
                                    : std::string(Trim(result->err))));
  }
  return Status::Ok();
}

Status SrunProcessRunner::KillOrphan(int64_t pid, const std::string& run_dir) {
  if (pid <= 1) return Status::InvalidArgument("pid " + std::to_string(pid) + " is not a worker");
  Result<std::string> srun = Srun();
  if (!srun.ok()) return srun.status();
  std::vector<std::string> argv{*srun};
  for (std::string& a : SrunArguments(
           options_, "",
           {"/bin/sh", "-c", kKillIfWorker, "mitra-orphan", run_dir, std::to_string(pid)})) {
    argv.push_back(std::move(a));
  }
  Result<CommandResult> result = command_(argv, options_.environment, options_.command_timeout_s);
  if (!result.ok()) return result.status();
  if (!result->ok()) {
    return Status::Unavailable("cannot stop worker pid " + std::to_string(pid) + " on " +
                               options_.node + ": " + std::string(Trim(result->err)));
  }
  return Status::Ok();
}

}  // namespace mitra::launcher
