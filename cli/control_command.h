// `mitra status`, `mitra stop` and `mitra drain`: the client side of the control socket.
//
//   mitra status [--run-dir DIR] [--json] [--timeout S]
//   mitra stop   [--run-dir DIR] [--wait] [--timeout S]
//   mitra drain  [--run-dir DIR] [--timeout S] MACHINE
//
// Each sends one request to RUN_DIR/control.sock (control_socket.h; the responses are described
// in status_report.h). When no manager answers there, `status` shows the last state the
// manager recorded in RUN_DIR/state.json and says it is not running; `stop` says so. Exit
// codes: 0 answered (stop: and, with --wait, the manager exited), 1 no manager, an error
// answer or a timeout, 2 bad usage.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "mitra/common/status.h"

namespace mitra::cli {

struct ControlCommandOptions {
  std::string action;                 // "status", "stop" or "drain"
  std::string run_dir = "mitra-run";  // --run-dir
  bool json = false;                  // status --json: print the response as it came
  bool wait = false;                  // stop --wait: until the manager has exited
  std::string machine;                // drain: the machine's address, as the list writes it
  // --timeout: seconds for the answer, and for stop --wait for the whole wait. 0: the default,
  // kDefaultAnswerTimeoutS or, with --wait, kDefaultStopWaitS.
  double timeout_s = 0;
  std::string help_text;  // non-empty for --help: print it, exit 0
};

inline constexpr double kDefaultAnswerTimeoutS = 10;
inline constexpr double kDefaultStopWaitS = 300;

// `args` starts with the command name ("status", "stop" or "drain"). InvalidArgument with the flag and
// the fix for anything wrong. Pure.
Result<ControlCommandOptions> ParseControlCommandLine(const std::vector<std::string>& args);

std::string StatusUsage();
std::string StopUsage();
std::string DrainUsage();

// Run the commands; return the process exit code. Block for at most the timeout (stop --wait
// checks every 0.1 s whether the manager is still there).
int StatusCommand(const ControlCommandOptions& options, std::ostream& out, std::ostream& err);
int StopCommand(const ControlCommandOptions& options, std::ostream& out, std::ostream& err);
int DrainCommand(const ControlCommandOptions& options, std::ostream& out, std::ostream& err);

// Parses `args` (as ParseControlCommandLine) and runs the command: what `main` calls.
int ControlCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace mitra::cli
