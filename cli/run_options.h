// The command line of `mitra`: which command, and for `mitra run` its flags and program.
//
//   mitra run --machines FILE --batch-size B [flags] -- PROGRAM [ARGS...]
//
// Parsing is pure (no file or process is looked at); checks that need the machine list or the
// program come later, in RunCommand.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mitra/common/status.h"

namespace mitra::cli {

// How workers on machines other than `localhost` are started (--launcher).
enum class Launcher { kSsh, kSrun };

struct RunOptions {
  std::string machines_path;          // --machines (required); "slurm": the Slurm allocation
  int64_t batch_size = 0;             // --batch-size: global batch B in samples (required)
  int stages = 0;                     // --nstages: pipeline stages P; 0 = planned (--profile)
  std::string profile_dir;            // --profile: what the planner plans from
  int chunk_size = 0;                 // --chunk-size: micro-batch; 0 = DefaultChunkSize (grid.h)
  int gpus_per_node = 1;              // --gpus-per-node: slots of a machine line without slots=
  bool gpus_per_node_given = false;   // --machines slurm: it overrides the allocation's tasks
  Launcher launcher = Launcher::kSsh;  // --launcher ssh|srun
  std::optional<int64_t> max_steps;   // --max-steps; unset: the program's own
  std::string run_dir = "mitra-run";  // --run-dir
  std::string checkpoint_dir;         // --checkpoint-dir: "" = RUN_DIR/checkpoints
  std::optional<int64_t> checkpoint_every;  // --checkpoint-every; unset: the program's own
  std::optional<int64_t> keep_checkpoints;  // --keep-checkpoints; unset: the program's own
  int threads = 0;                    // --threads: 0 = MITRA_THREADS from the environment, else 1
  std::string precision;              // --precision fp32|bf16|fp16: MITRA_PRECISION; "" = the program's
  std::optional<bool> zero;           // --zero 0|1: ZeRO-1; unset: the planner's, or the program's
  double timeout_s = 0;        // --timeout: 0 = MITRA_TIMEOUT_S from the environment, else 30
  double stop_timeout_s = 60;  // --stop-timeout: how long a stop may take before kill
  int max_restarts = 5;        // --max-restarts: unplanned restarts allowed within 10 minutes
  double heartbeat_timeout_s = 5;  // --heartbeat-timeout: a silent rank is hung after this
  double start_timeout_s = 300;    // --start-timeout: launch -> every rank ready
  std::string code_dir;        // --code-dir: working directory of remote workers ("": ours)
  std::vector<std::pair<std::string, std::string>> env;  // --env KEY=VALUE (repeatable)
  std::string known_hosts;     // --known-hosts: "" = ~/.ssh/known_hosts
  std::string identity;        // --identity: an SSH private key; "" = agent, then ~/.ssh/id_*
  std::string preemption_command;     // --preemption-command: "" = none
  double preemption_interval_s = 5;   // --preemption-interval
  bool exclude_stragglers = false;    // --exclude-stragglers
  bool no_regroup = false;            // --no-regroup: every generation starts every worker
  int spares = 0;                     // --spares N: standby workers kept on each machine
  int64_t metrics_port = 0;    // --metrics-port: serve Prometheus metrics there; 0 = none
  std::string metrics_address = "127.0.0.1";  // --metrics-address: where they are served
  std::string program;         // after `--`
  std::vector<std::string> program_args;
};

enum class CommandKind { kRun, kCheckpoint, kReport, kProfile, kPlan, kHelp, kVersion };

// `mitra checkpoint list|verify DIR`, `mitra checkpoint export DIR OUT.pt`
struct CheckpointCommandOptions {
  std::string action;  // "list", "verify" or "export"
  std::string dir;     // a checkpoint directory (RUN_DIR/checkpoints by default), or for
                       // export also one step-N directory
  std::string out;     // export: the file to write
};

// Where Debian's libjs-chart.js installs Chart.js.
inline constexpr const char* kDebianChartJs = "/usr/share/javascript/chart.js/chart.min.js";

// `mitra report RUN_DIR [-o FILE] [--chart-js FILE]`
struct ReportCommandOptions {
  std::string run_dir;                    // required
  std::string out;                        // -o, --out: "" = RUN_DIR/report.html
  std::string chart_js = kDebianChartJs;  // --chart-js: the Chart.js file inlined in the page
};

struct Command {
  CommandKind kind = CommandKind::kHelp;
  RunOptions run;         // kRun
  CheckpointCommandOptions checkpoint;  // kCheckpoint
  ReportCommandOptions report;          // kReport
  std::vector<std::string> args;  // kProfile, kPlan: argv after the command's name
  std::string help_text;  // kHelp: what to print
};

// Parses argv[1..]. InvalidArgument for anything wrong, with a message that names the flag and
// the fix (the caller prints it and exits 2). `mitra status` and `mitra stop` are parsed by
// control_command.h.
Result<Command> ParseCommandLine(const std::vector<std::string>& args);

std::string MainUsage();
std::string RunUsage();
std::string CheckpointUsage();
std::string ReportUsage();

}  // namespace mitra::cli
