#include "manager/run_options.h"

#include <algorithm>
#include <cctype>
#include <optional>

#include "common/strings.h"

namespace mitra::manager {
namespace {

constexpr const char* kSeeHelp = "; see `mitra run --help`";

const std::vector<std::string>& KnownFlags() {
  static const std::vector<std::string> flags = {
      "--machines",  "--batch-size", "--nstages", "--chunk-size", "--gpus-per-node",
      "--max-steps", "--run-dir",    "--threads", "--timeout",    "--stop-timeout",
      "--checkpoint-dir", "--checkpoint-every", "--keep-checkpoints", "--max-restarts",
      "--heartbeat-timeout", "--code-dir", "--env", "--known-hosts", "--identity", "--profile"};
  return flags;
}

// Levenshtein distance, for "did you mean".
size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::string UnknownFlag(const std::string& flag) {
  std::string best;
  size_t best_distance = 3;  // suggest only close matches
  for (const std::string& known : KnownFlags()) {
    // A typo (small edit distance) or a truncation ("--batch" for "--batch-size").
    const size_t d = StartsWith(known, flag) && flag.size() > 3 ? 1 : EditDistance(flag, known);
    if (d < best_distance) {
      best = known;
      best_distance = d;
    }
  }
  std::string message = "mitra run: unknown flag '" + flag + "'";
  if (!best.empty()) message += "; did you mean " + best + "?";
  return message + (best.empty() ? kSeeHelp : " See `mitra run --help`");
}

Status BadValue(const std::string& flag, const std::string& value, const std::string& expected,
                const std::string& example) {
  return Status::InvalidArgument("mitra run: " + flag + " '" + value + "' is not " + expected +
                                 " (e.g. " + flag + " " + example + ")");
}

// Integer flag value in [min, max].
Status ReadInt(const std::string& flag, const std::string& value, int64_t min, int64_t max,
               const std::string& example, int64_t* out) {
  const std::optional<int64_t> parsed = ParseInt64(value);
  if (!parsed || *parsed < min || *parsed > max) {
    const std::string expected = min == 0   ? "a whole number >= 0"
                                 : min == 1 ? "a whole number >= 1"
                                            : "a whole number >= " + std::to_string(min);
    return BadValue(flag, value, expected, example);
  }
  *out = *parsed;
  return Status::Ok();
}

Status ReadSeconds(const std::string& flag, const std::string& value, double* out) {
  const std::optional<double> parsed = ParseDouble(value);
  if (!parsed || *parsed <= 0) return BadValue(flag, value, "a positive number of seconds", "30");
  *out = *parsed;
  return Status::Ok();
}

Status SetFlag(const std::string& flag, const std::string& value, RunOptions* o) {
  constexpr int64_t kIntMax = 1 << 30;
  int64_t n = 0;
  Status s;
  if (flag == "--machines") {
    if (value.empty()) return BadValue(flag, value, "a file name", "machines.txt");
    o->machines_path = value;
  } else if (flag == "--run-dir") {
    if (value.empty()) return BadValue(flag, value, "a directory name", "mitra-run");
    o->run_dir = value;
  } else if (flag == "--profile") {
    if (value.empty()) return BadValue(flag, value, "a directory name", "profile");
    o->profile_dir = value;
  } else if (flag == "--checkpoint-dir") {
    if (value.empty()) return BadValue(flag, value, "a directory name", "checkpoints");
    o->checkpoint_dir = value;
  } else if (flag == "--checkpoint-every") {
    s = ReadInt(flag, value, 1, int64_t{1} << 40, "100", &o->checkpoint_every);
  } else if (flag == "--keep-checkpoints") {
    s = ReadInt(flag, value, 1, kIntMax, "3", &n);
    if (s.ok()) o->keep_checkpoints = static_cast<int>(n);
  } else if (flag == "--batch-size") {
    s = ReadInt(flag, value, 1, int64_t{1} << 40, "64", &o->batch_size);
  } else if (flag == "--max-steps") {
    s = ReadInt(flag, value, 0, int64_t{1} << 50, "1000", &o->max_steps);
  } else if (flag == "--nstages" || flag == "--chunk-size" || flag == "--gpus-per-node" ||
             flag == "--threads") {
    s = ReadInt(flag, value, 1, kIntMax, flag == "--nstages" ? "2" : "4", &n);
    int* field = flag == "--nstages"         ? &o->stages
                 : flag == "--chunk-size"    ? &o->chunk_size
                 : flag == "--gpus-per-node" ? &o->gpus_per_node
                                             : &o->threads;
    if (s.ok()) *field = static_cast<int>(n);
  } else if (flag == "--timeout") {
    s = ReadSeconds(flag, value, &o->timeout_s);
  } else if (flag == "--stop-timeout") {
    s = ReadSeconds(flag, value, &o->stop_timeout_s);
  } else if (flag == "--heartbeat-timeout") {
    s = ReadSeconds(flag, value, &o->heartbeat_timeout_s);
  } else if (flag == "--max-restarts") {
    s = ReadInt(flag, value, 0, kIntMax, "5", &n);
    if (s.ok()) o->max_restarts = static_cast<int>(n);
  } else if (flag == "--code-dir" || flag == "--known-hosts" || flag == "--identity") {
    if (value.empty()) return BadValue(flag, value, "a path", flag == "--code-dir" ? "/srv/train" : "~/.ssh/...");
    (flag == "--code-dir" ? o->code_dir : flag == "--known-hosts" ? o->known_hosts : o->identity) =
        value;
  } else if (flag == "--env") {
    const size_t eq = value.find('=');
    const std::string key = value.substr(0, eq);
    const bool valid_key =
        !key.empty() && !std::isdigit(static_cast<unsigned char>(key[0])) &&
        std::all_of(key.begin(), key.end(),
                    [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
    if (eq == std::string::npos || !valid_key) {
      return BadValue(flag, value, "KEY=VALUE with KEY made of letters, digits and '_'",
                      "NCCL_DEBUG=INFO");
    }
    o->env.emplace_back(key, value.substr(eq + 1));
  } else {
    return Status::Internal("flag " + flag + " has no handler");
  }
  return s;
}

Result<Command> ParseRun(const std::vector<std::string>& args) {
  Command command;
  command.kind = CommandKind::kRun;
  RunOptions& o = command.run;
  size_t i = 0;
  bool saw_separator = false;
  while (i < args.size()) {
    const std::string& arg = args[i++];
    if (arg == "--") {
      saw_separator = true;
      break;
    }
    if (arg == "-h" || arg == "--help") {
      command.kind = CommandKind::kHelp;
      command.help_text = RunUsage();
      return command;
    }
    if (!StartsWith(arg, "-")) {
      return Status::InvalidArgument(
          "mitra run: unexpected argument '" + arg +
          "'; put the program and its arguments after `--`, e.g. mitra run --machines "
          "machines.txt --batch-size 64 -- ./train --lr 0.1");
    }
    const size_t eq = arg.find('=');
    const std::string flag = arg.substr(0, eq);
    if (std::find(KnownFlags().begin(), KnownFlags().end(), flag) == KnownFlags().end()) {
      return Status::InvalidArgument(UnknownFlag(flag));
    }
    std::string value;
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else if (i < args.size() && !StartsWith(args[i], "--")) {  // "--x" is a flag, not a value
      value = args[i++];
    } else {
      return Status::InvalidArgument("mitra run: " + flag + " needs a value" + kSeeHelp);
    }
    if (Status s = SetFlag(flag, value, &o); !s.ok()) return s;
  }
  if (o.machines_path.empty()) {
    return Status::InvalidArgument(
        "mitra run: --machines is required: the machine list, e.g. --machines machines.txt "
        "with the line `localhost slots=2`");
  }
  if (o.batch_size == 0) {
    return Status::InvalidArgument(
        "mitra run: --batch-size is required: the global batch in samples per step, e.g. "
        "--batch-size 64");
  }
  if (!saw_separator) {
    return Status::InvalidArgument(
        "mitra run: no program given; end the command with `-- PROGRAM [ARGS...]`, e.g. "
        "-- ./build/examples/gpt/gpt_train");
  }
  if (i >= args.size() || args[i].empty()) {
    return Status::InvalidArgument(
        "mitra run: no program after `--`; give the training program and its arguments, e.g. "
        "-- ./build/examples/gpt/gpt_train");
  }
  o.program = args[i++];
  o.program_args.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  return command;
}

}  // namespace

Result<Command> ParseCommandLine(const std::vector<std::string>& args) {
  Command command;
  if (args.empty()) return Status::InvalidArgument(MainUsage());
  const std::string& name = args[0];
  if (name == "-h" || name == "--help" || name == "help") {
    command.kind = CommandKind::kHelp;
    command.help_text = args.size() > 1 && args[1] == "run" ? RunUsage() : MainUsage();
    return command;
  }
  if (name == "--version" || name == "version") {
    command.kind = CommandKind::kVersion;
    return command;
  }
  if (name == "run") return ParseRun(std::vector<std::string>(args.begin() + 1, args.end()));
  if (name == "checkpoint") {
    if (args.size() == 2 && (args[1] == "--help" || args[1] == "-h")) {
      command.help_text = CheckpointUsage();
      return command;
    }
    const bool is_export = args.size() >= 2 && args[1] == "export";
    if (args.size() != (is_export ? 4u : 3u) ||
        (!is_export && args[1] != "list" && args[1] != "verify")) {
      return Status::InvalidArgument(CheckpointUsage());
    }
    command.kind = CommandKind::kCheckpoint;
    command.checkpoint = {args[1], args[2], is_export ? args[3] : ""};
    return command;
  }
  if (name == "profile" || name == "plan") {
    // Parsed by planner_commands.h, whose usage --help prints.
    command.kind = name == "profile" ? CommandKind::kProfile : CommandKind::kPlan;
    command.args.assign(args.begin() + 1, args.end());
    return command;
  }
  return Status::InvalidArgument("mitra: unknown command '" + name +
                                 "'; the commands are run, profile, plan, checkpoint, status, "
                                 "stop (see `mitra --help`)");
}

std::string MainUsage() {
  return "usage: mitra run --machines FILE --batch-size B [flags] -- PROGRAM [ARGS...]\n"
         "       mitra profile --machines FILE --batch-size B --out DIR -- PROGRAM [ARGS...]\n"
         "       mitra plan --profile DIR --batch-size B (--slots N | --machines FILE)\n"
         "       mitra checkpoint list|verify DIR | export DIR OUT.pt\n"
         "       mitra status | stop [--run-dir DIR]\n"
         "       mitra --help | run --help | --version\n"
         "\n"
         "mitra runs a pipeline x data-parallel training job on the machines in FILE.\n"
         "Exit codes: 0 done or stopped, 1 failed, 2 bad usage or input.\n";
}

std::string CheckpointUsage() {
  return "usage: mitra checkpoint list DIR\n"
         "       mitra checkpoint verify DIR\n"
         "       mitra checkpoint export DIR OUT.pt\n"
         "\n"
         "DIR is a checkpoint directory (default of mitra run: RUN_DIR/checkpoints).\n"
         "  list     each checkpoint: step, the shape that wrote it, size, whether it verifies\n"
         "  verify   check every checkpoint's manifest and file checksums (exit 1 if one fails)\n"
         "  export   write the newest checkpoint that verifies (or DIR itself when DIR is one\n"
         "           step-N directory) as one file that Python's torch.load reads:\n"
         "           {'model': {parameter name: tensor}, 'optimizer': {'exp_avg': {...},\n"
         "           'exp_avg_sq': {...}, 'step': {...}}, 'trainer': {'step': ..., ...}}.\n"
         "           A damaged checkpoint is refused, naming the file (exit 2).\n";
}

std::string RunUsage() {
  return "usage: mitra run --machines FILE --batch-size B [flags] -- PROGRAM [ARGS...]\n"
         "\n"
         "  --machines FILE       machine list: `localhost slots=N`, `[user@]host[:port]\n"
         "                        slots=N` for SSH machines ('#' comments); edit it while the\n"
         "                        job runs to grow or shrink it\n"
         "  --batch-size B        global batch, samples per step (split over the replicas)\n"
         "  --nstages P           pipeline stages; replicas D = slots / P. Without it the\n"
         "                        planner chooses P, D, micro-batch, schedule and partition\n"
         "                        at every launch, from a profile (--profile)\n"
         "  --profile DIR         the profile to plan from (`mitra profile`); without it the\n"
         "                        program is profiled once, into RUN_DIR/profile\n"
         "  --chunk-size M        micro-batch size (default: planned, or about 4 P\n"
         "                        micro-batches per replica with --nstages)\n"
         "  --gpus-per-node N     slots of a machine line without slots= (default 1)\n"
         "  --max-steps N         train N steps (default 0: the program's own default)\n"
         "  --run-dir DIR         run directory (default mitra-run); an existing run\n"
         "                        directory is continued from its newest checkpoint\n"
         "  --checkpoint-dir DIR  checkpoints (default RUN_DIR/checkpoints)\n"
         "  --checkpoint-every N  checkpoint every N steps (default: only at the end and\n"
         "                        on stop)\n"
         "  --keep-checkpoints K  complete checkpoints kept (default 3)\n"
         "  --threads N           MITRA_THREADS for the workers (default: inherited, else 1)\n"
         "  --timeout S           MITRA_TIMEOUT_S for the workers (default: inherited, else 30)\n"
         "  --stop-timeout S      seconds a stop may take before the workers are killed "
         "(default 60)\n"
         "  --max-restarts N      unplanned restarts (failures) allowed within 10 minutes\n"
         "                        before the job fails (default 5; 0: the first failure ends it)\n"
         "  --heartbeat-timeout S a worker silent this long is hung (default 5)\n"
         "  --code-dir DIR        working directory of the workers on SSH machines (default:\n"
         "                        the directory mitra run was started in)\n"
         "  --env KEY=VALUE       set a variable for every worker (repeatable)\n"
         "  --known-hosts FILE    SSH host keys (default ~/.ssh/known_hosts)\n"
         "  --identity FILE       SSH private key (default: ssh-agent, then ~/.ssh/id_*)\n"
         "\n"
         "Ctrl-C (or `mitra stop`) asks every worker to checkpoint and stop after the same\n"
         "step; a second Ctrl-C kills them. `mitra status` shows the job.\n";
}

}  // namespace mitra::manager
