#include "cli/control_command.h"

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <thread>

#include "cli/flags.h"
#include "cli/run_command.h"
#include "common/clock.h"
#include "common/duration_text.h"
#include "common/file_system.h"
#include "common/json.h"
#include "common/strings.h"
#include "manager/status_report.h"
#include "records/reader.h"
#include "run/control_socket.h"

namespace mitra::cli {
namespace {

double AnswerTimeout(const ControlCommandOptions& options) {
  return options.timeout_s > 0 ? options.timeout_s : kDefaultAnswerTimeoutS;
}

// The error text of an {"ok":false,...} response, or "" for a success.
std::string ErrorOf(const JsonObject& response) {
  const JsonValue* ok = response.Find("ok");
  if (ok != nullptr && ok->type() == JsonValue::Type::kBool && ok->bool_value()) return "";
  return response.GetString("error").value_or("the manager refused the request (" +
                                               response.ToJson() + ")");
}

// The pid state.json names when that process still exists and the recorded state says it is
// running: a manager that does not answer on its socket (hung, or older than the socket).
std::optional<int64_t> UnansweringManagerPid(const manager::StatusReport& recorded) {
  // Any state but an end one: running, morphing, recovering, waiting, stopping.
  const bool active = !recorded.state.empty() && !records::State::IsEnd(recorded.state);
  if (!active || !recorded.manager_pid || *recorded.manager_pid <= 0) return std::nullopt;
  if (::kill(static_cast<pid_t>(*recorded.manager_pid), 0) != 0) return std::nullopt;
  return recorded.manager_pid;
}

std::optional<manager::StatusReport> ReadRecordedState(const std::string& run_dir) {
  PosixFileSystem fs;
  const std::optional<JsonObject> state = records::RunDirReader(&fs, run_dir).StateJson();
  if (!state) return std::nullopt;
  return manager::StatusReport::FromJson(*state);
}

// `mitra status` when no manager answers: what the last one recorded.
int ShowRecordedState(const ControlCommandOptions& options, const Status& why, std::ostream& out,
                      std::ostream& err) {
  PosixFileSystem fs;
  const std::string& run_dir = options.run_dir;
  if (!fs.IsDirectory(run_dir)) {
    err << "mitra status: " << run_dir << " is not a run directory (it does not exist); give "
        << "the one `mitra run` uses with --run-dir DIR" << std::endl;
    return kExitFailed;
  }
  const std::string state_path = JoinPath(run_dir, records::kStateFile);
  Result<std::string> text = fs.ReadFile(state_path);
  if (!text.ok()) {
    err << "mitra status: " << why.message() << "; " << state_path
        << " does not exist either, so no run has started here" << std::endl;
    return kExitFailed;
  }
  Result<JsonObject> state = JsonObject::Parse(*text);
  if (!state.ok()) {
    err << "mitra status: " << why.message() << "; " << state_path
        << " cannot be read: " << state.status().message() << std::endl;
    return kExitFailed;
  }
  const manager::StatusReport report = manager::StatusReport::FromJson(*state);
  std::string note = "mitra status: no manager is running on " + run_dir;
  if (const std::optional<int64_t> pid = UnansweringManagerPid(report)) {
    note = "mitra status: the manager of " + run_dir + " (pid " + std::to_string(*pid) +
           " in state.json) does not answer on " + run::ControlSocketPath(run_dir);
  }
  if (options.json) {
    err << note << "; its last recorded state follows" << std::endl;
    out << state->ToJson() << std::endl;
    return kExitFailed;
  }
  const double now = SystemClock().WallSeconds();
  out << note << "; last recorded state";
  if (report.updated_at) out << " (" << HumanDuration(now - *report.updated_at) << " ago)";
  out << ", from " << state_path << ":\n" << manager::FormatStatus(report, now) << std::flush;
  return kExitFailed;
}

}  // namespace

Result<ControlCommandOptions> ParseControlCommandLine(const std::vector<std::string>& args) {
  ControlCommandOptions o;
  if (args.empty() || (args[0] != "status" && args[0] != "stop" && args[0] != "drain")) {
    return Status::Internal("ParseControlCommandLine needs status, stop or drain first");
  }
  o.action = args[0];
  Flags flags(o.action);
  flags.Text("--run-dir", &o.run_dir, "a directory name", "mitra-run");
  flags.Seconds("--timeout", &o.timeout_s, "10");
  if (o.action == "status") {
    flags.Switch("--json", &o.json);
  } else if (o.action == "stop") {
    flags.Switch("--wait", &o.wait);
  } else {
    flags.Word("MACHINE", &o.machine);
  }
  if (Status s = flags.Parse(std::vector<std::string>(args.begin() + 1, args.end())); !s.ok()) {
    return s;
  }
  if (flags.help()) {
    o.help_text = o.action == "status" ? StatusUsage()
                  : o.action == "stop" ? StopUsage()
                                       : DrainUsage();
    return o;
  }
  if (o.action == "drain" && o.machine.empty()) {
    return Status::InvalidArgument(
        "mitra drain: which machine? give its address as the machine list writes it, e.g. "
        "`mitra drain --run-dir DIR 10.0.0.7` (`mitra status` lists them)");
  }
  return o;
}

std::string StatusUsage() {
  return "usage: mitra status [--run-dir DIR] [--json] [--timeout S]\n"
         "\n"
         "Shows what the manager running on DIR is doing: its state (running, morphing,\n"
         "waiting, recovering, stopping), the shape P x D, the step, loss and throughput,\n"
         "every machine (in use, idle slots, failed until when) and the last event.\n"
         "\n"
         "  --run-dir DIR   the run directory given to `mitra run` (default mitra-run)\n"
         "  --json          print the manager's answer as one JSON object\n"
         "  --timeout S     seconds to wait for the answer (default 10)\n"
         "\n"
         "When no manager runs there, shows the last state recorded in DIR/state.json and\n"
         "exits 1. Exit codes: 0 the manager answered, 1 it did not, 2 bad usage.\n";
}

std::string StopUsage() {
  return "usage: mitra stop [--run-dir DIR] [--wait] [--timeout S]\n"
         "\n"
         "Asks the manager running on DIR to stop the job: every worker checkpoints after\n"
         "the same step, then the manager exits (like Ctrl-C where `mitra run` runs).\n"
         "\n"
         "  --run-dir DIR   the run directory given to `mitra run` (default mitra-run)\n"
         "  --wait          wait until the manager has exited\n"
         "  --timeout S     seconds to wait for the answer (default 10), or with --wait for\n"
         "                  the manager to exit (default 300)\n"
         "\n"
         "Exit codes: 0 the manager is stopping (with --wait: has exited), 1 no manager\n"
         "runs on DIR, it refused or did not exit in time, 2 bad usage.\n";
}

std::string DrainUsage() {
  return "usage: mitra drain [--run-dir DIR] [--timeout S] MACHINE\n"
         "\n"
         "Moves the job running on DIR off MACHINE with a planned morph (every worker\n"
         "checkpoints after the same step; nothing is lost, no failure is recorded) and keeps\n"
         "it off until MACHINE's line in the machine list changes. MACHINE is its address as\n"
         "the list writes it (`mitra status` shows them). The word `drain` on the machine's\n"
         "line does the same from the list.\n"
         "\n"
         "  --run-dir DIR   the run directory given to `mitra run` (default mitra-run)\n"
         "  --timeout S     seconds to wait for the answer (default 10)\n"
         "\n"
         "Exit codes: 0 the manager is draining it (or has), 1 no manager runs on DIR or it\n"
         "refused (a machine the list lacks), 2 bad usage.\n";
}

int DrainCommand(const ControlCommandOptions& options, std::ostream& out, std::ostream& err) {
  JsonObject request;
  request.SetString("command", manager::kDrainCommand).SetString("machine", options.machine);
  Result<JsonObject> response = run::SendControlRequest(run::ControlSocketPath(options.run_dir), request,
                                                   AnswerTimeout(options));
  if (!response.ok()) {
    err << "mitra drain: " << response.status().message() << std::endl;
    return kExitFailed;
  }
  if (const std::string error = ErrorOf(*response); !error.empty()) {
    err << "mitra drain: the manager answered: " << error << std::endl;
    return kExitFailed;
  }
  out << "mitra drain: " << response->GetString("message").value_or("draining") << std::endl;
  return kExitOk;
}

int StatusCommand(const ControlCommandOptions& options, std::ostream& out, std::ostream& err) {
  const std::string socket_path = run::ControlSocketPath(options.run_dir);
  JsonObject request;
  request.SetString("command", manager::kStatusCommand);
  Result<JsonObject> response = run::SendControlRequest(socket_path, request, AnswerTimeout(options));
  if (!response.ok()) {
    if (response.status().code() == Status::Code::kNotFound) {
      return ShowRecordedState(options, response.status(), out, err);
    }
    err << "mitra status: " << response.status().message() << std::endl;
    return kExitFailed;
  }
  if (options.json) {
    out << response->ToJson() << std::endl;
    return ErrorOf(*response).empty() ? kExitOk : kExitFailed;
  }
  if (const std::string error = ErrorOf(*response); !error.empty()) {
    err << "mitra status: the manager answered: " << error << std::endl;
    return kExitFailed;
  }
  out << manager::FormatStatus(manager::StatusReport::FromJson(*response), SystemClock().WallSeconds())
      << std::flush;
  return kExitOk;
}

int StopCommand(const ControlCommandOptions& options, std::ostream& out, std::ostream& err) {
  const std::string socket_path = run::ControlSocketPath(options.run_dir);
  const auto start = std::chrono::steady_clock::now();
  JsonObject request;
  request.SetString("command", manager::kStopCommand);
  Result<JsonObject> response = run::SendControlRequest(socket_path, request, AnswerTimeout(options));
  if (!response.ok()) {
    err << "mitra stop: " << response.status().message() << std::endl;
    const std::optional<manager::StatusReport> recorded = ReadRecordedState(options.run_dir);
    if (const std::optional<int64_t> pid =
            recorded ? UnansweringManagerPid(*recorded) : std::nullopt) {
      err << "mitra stop: state.json names a manager with pid " << *pid
          << " that still exists; to stop it without the socket: kill -INT " << *pid
          << std::endl;
    }
    return kExitFailed;
  }
  if (const std::string error = ErrorOf(*response); !error.empty()) {
    err << "mitra stop: the manager answered: " << error << std::endl;
    return kExitFailed;
  }
  out << "mitra stop: "
      << response->GetString("message").value_or("the manager is stopping the job") << std::endl;
  if (!options.wait) return kExitOk;

  const double limit_s = options.timeout_s > 0 ? options.timeout_s : kDefaultStopWaitS;
  const auto deadline = start + std::chrono::duration<double>(limit_s);
  // The manager removes its socket as it exits; a crashed one leaves a socket nobody answers.
  while (run::ControlSocketIsLive(socket_path)) {
    if (std::chrono::steady_clock::now() >= deadline) {
      err << "mitra stop: the manager on " << options.run_dir << " is still running after "
          << SecondsText(limit_s) << " s; `mitra status --run-dir " << options.run_dir
          << "` shows what it is doing" << std::endl;
      return kExitFailed;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  out << "mitra stop: the manager has exited" << std::endl;
  return kExitOk;
}

int ControlCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  Result<ControlCommandOptions> options = ParseControlCommandLine(args);
  if (!options.ok()) {
    err << options.status().message() << std::endl;
    return kExitBadInput;
  }
  if (!options->help_text.empty()) {
    out << options->help_text;
    return kExitOk;
  }
  if (options->action == "status") return StatusCommand(*options, out, err);
  if (options->action == "drain") return DrainCommand(*options, out, err);
  return StopCommand(*options, out, err);
}

}  // namespace mitra::cli
