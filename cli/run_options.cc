#include "cli/run_options.h"

#include "cli/flags.h"
#include "mitra/contract/precision.h"

namespace mitra::cli {
namespace {

constexpr int64_t kMaxBatch = int64_t{1} << 40;

Result<Command> ParseRun(const std::vector<std::string>& args) {
  Command command;
  command.kind = CommandKind::kRun;
  RunOptions& o = command.run;
  Flags flags("run");
  flags.Text("--machines", &o.machines_path, "a file name", "machines.txt");
  flags.Whole("--batch-size", 1, &o.batch_size, "64", kMaxBatch);
  flags.Whole("--nstages", 1, &o.stages, "2");
  flags.Whole("--chunk-size", 1, &o.chunk_size, "4");
  o.gpus_per_node = 0;  // 0 until given: --machines slurm tells the two apart
  flags.Whole("--gpus-per-node", 1, &o.gpus_per_node, "4");
  std::string launcher;
  flags.Text("--launcher", &launcher, "ssh or srun", "srun");
  flags.Whole("--max-steps", 0, &o.max_steps, "1000");
  flags.Text("--run-dir", &o.run_dir, "a directory name", "mitra-run");
  flags.Whole("--threads", 1, &o.threads, "4");
  flags.Text("--precision", &o.precision, "fp32, bf16 or fp16", "bf16");
  std::optional<int64_t> zero;
  flags.Whole("--zero", 0, &zero, "1", 1);
  flags.Seconds("--timeout", &o.timeout_s, "30");
  flags.Seconds("--stop-timeout", &o.stop_timeout_s, "120");
  flags.Text("--checkpoint-dir", &o.checkpoint_dir, "a directory name", "checkpoints");
  flags.Whole("--checkpoint-every", 1, &o.checkpoint_every, "100", kMaxBatch);
  flags.Whole("--keep-checkpoints", 1, &o.keep_checkpoints, "3", kMaxBatch);
  flags.Whole("--max-restarts", 0, &o.max_restarts, "5");
  flags.Seconds("--heartbeat-timeout", &o.heartbeat_timeout_s, "10");
  flags.Seconds("--start-timeout", &o.start_timeout_s, "600");
  flags.Text("--code-dir", &o.code_dir, "a path", "/srv/train");
  flags.Environment("--env", &o.env);
  flags.Text("--known-hosts", &o.known_hosts, "a path", "~/.ssh/known_hosts");
  flags.Text("--identity", &o.identity, "a path", "~/.ssh/id_ed25519");
  flags.Text("--profile", &o.profile_dir, "a directory name", "profile");
  flags.Text("--preemption-command", &o.preemption_command, "a shell command",
             "'curl -sf http://169.254.169.254/spot/notice'");
  flags.Seconds("--preemption-interval", &o.preemption_interval_s, "5");
  flags.Switch("--exclude-stragglers", &o.exclude_stragglers);
  flags.Switch("--no-regroup", &o.no_regroup);
  flags.Whole("--spares", 0, &o.spares, "1");
  flags.Whole("--metrics-port", 1, &o.metrics_port, "9400", 65535);
  std::string metrics_address;  // "" when not given
  flags.Text("--metrics-address", &metrics_address, "an IP address", "0.0.0.0");
  flags.Program(&o.program, &o.program_args,
                "mitra run --machines machines.txt --batch-size 64 -- ./train --lr 0.1");
  if (Status s = flags.Parse(args); !s.ok()) return s;
  if (flags.help()) {
    command.kind = CommandKind::kHelp;
    command.help_text = RunUsage();
    return command;
  }
  if (zero) o.zero = *zero == 1;
  o.gpus_per_node_given = o.gpus_per_node > 0;
  if (!o.gpus_per_node_given) o.gpus_per_node = 1;
  if (launcher == "srun") {
    o.launcher = Launcher::kSrun;
  } else if (!launcher.empty() && launcher != "ssh") {
    return Status::InvalidArgument("mitra run: --launcher '" + launcher +
                                   "' is not a launcher; use --launcher ssh (the default) or "
                                   "--launcher srun (inside a Slurm allocation)");
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
  if (!o.precision.empty()) {
    if (Status s = contract::CheckPrecision(o.precision, "mitra run: --precision"); !s.ok()) {
      return s;
    }
  }
  if (!metrics_address.empty()) {
    if (o.metrics_port == 0) {
      return Status::InvalidArgument(
          "mitra run: --metrics-address says where --metrics-port serves the metrics: add "
          "--metrics-port PORT (e.g. --metrics-port 9400), or leave out --metrics-address");
    }
    o.metrics_address = metrics_address;
  }
  if (Status s = flags.CheckProgram(); !s.ok()) return s;
  return command;
}

// `mitra checkpoint list|verify DIR`, `mitra checkpoint export DIR OUT.pt`
Result<Command> ParseCheckpoint(const std::vector<std::string>& args) {
  Command command;
  command.kind = CommandKind::kCheckpoint;
  CheckpointCommandOptions& o = command.checkpoint;
  Flags flags("checkpoint");
  flags.Word("action", &o.action);
  flags.Word("dir", &o.dir);
  flags.Word("out", &o.out);
  if (Status s = flags.Parse(args); !s.ok()) return s;
  if (flags.help()) {
    command.kind = CommandKind::kHelp;
    command.help_text = CheckpointUsage();
    return command;
  }
  const bool is_export = o.action == "export";
  if (o.dir.empty() || is_export == o.out.empty() ||
      (!is_export && o.action != "list" && o.action != "verify")) {
    return Status::InvalidArgument(CheckpointUsage());
  }
  return command;
}

// `mitra report RUN_DIR [-o FILE] [--chart-js FILE]`
Result<Command> ParseReport(const std::vector<std::string>& args) {
  Command command;
  command.kind = CommandKind::kReport;
  ReportCommandOptions& o = command.report;
  Flags flags("report");
  flags.Word("run_dir", &o.run_dir);
  flags.Text("-o,--out", &o.out, "a file name", "report.html");
  flags.Text("--chart-js", &o.chart_js, "a file name", "chart.min.js");
  if (Status s = flags.Parse(args); !s.ok()) return s;
  if (flags.help()) {
    command.kind = CommandKind::kHelp;
    command.help_text = ReportUsage();
    return command;
  }
  if (o.run_dir.empty()) {
    return Status::InvalidArgument(
        "mitra report: no run directory given; e.g. mitra report mitra-run (see `mitra report "
        "--help`)");
  }
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
    return ParseCheckpoint(std::vector<std::string>(args.begin() + 1, args.end()));
  }
  if (name == "report") {
    return ParseReport(std::vector<std::string>(args.begin() + 1, args.end()));
  }
  if (name == "profile" || name == "plan") {
    // Parsed by planner_commands.h, whose usage --help prints.
    command.kind = name == "profile" ? CommandKind::kProfile : CommandKind::kPlan;
    command.args.assign(args.begin() + 1, args.end());
    return command;
  }
  return Status::InvalidArgument("mitra: unknown command '" + name +
                                 "'; the commands are run, profile, plan, checkpoint, report, "
                                 "status, stop, drain (see `mitra --help`)");
}

std::string MainUsage() {
  return "usage: mitra run --machines FILE --batch-size B [flags] -- PROGRAM [ARGS...]\n"
         "       mitra profile --machines FILE --batch-size B --out DIR -- PROGRAM [ARGS...]\n"
         "       mitra plan --profile DIR --batch-size B (--slots N | --machines FILE)\n"
         "       mitra checkpoint list|verify DIR | export DIR OUT.pt\n"
         "       mitra report RUN_DIR [-o FILE]\n"
         "       mitra status | stop [--run-dir DIR]\n"
         "       mitra drain [--run-dir DIR] MACHINE\n"
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
         "                        job runs to grow or shrink it. `--machines slurm`: the nodes\n"
         "                        of the Slurm allocation mitra runs in, slots from\n"
         "                        SLURM_TASKS_PER_NODE (or --gpus-per-node)\n"
         "  --batch-size B        global batch, samples per step (split over the replicas)\n"
         "  --nstages P           pipeline stages; replicas D = slots / P. Without it the\n"
         "                        planner chooses P, D, micro-batch, schedule, partition and\n"
         "                        shares at every launch, from a profile (--profile); with\n"
         "                        it and --profile, everything but P\n"
         "  --profile DIR         the profile to plan from (`mitra profile`); without it the\n"
         "                        program is profiled once, into RUN_DIR/profile\n"
         "  --chunk-size M        micro-batch size (default: planned, or about 4 P\n"
         "                        micro-batches per replica with --nstages)\n"
         "  --gpus-per-node N     slots of a machine line without slots= (default 1)\n"
         "  --max-steps N         train N steps (default: the program's own)\n"
         "  --run-dir DIR         run directory (default mitra-run); an existing run\n"
         "                        directory is continued from its newest checkpoint\n"
         "  --checkpoint-dir DIR  checkpoints (default RUN_DIR/checkpoints)\n"
         "  --checkpoint-every N  checkpoint every N steps (default: the program's own,\n"
         "                        which is only at the end and on stop unless it says)\n"
         "  --keep-checkpoints K  complete checkpoints kept (default: the program's own, 3\n"
         "                        unless it says)\n"
         "  --threads N           MITRA_THREADS for the workers (default: inherited, else 1)\n"
         "  --timeout S           MITRA_TIMEOUT_S for the workers (default: inherited, else 30)\n"
         "  --precision P         MITRA_PRECISION for the workers: fp32, bf16 (autocast, fp32\n"
         "                        master weights) or fp16 (a GPU only; dynamic loss scaling)\n"
         "                        (default: the program's own)\n"
         "  --zero 0|1            MITRA_ZERO for the workers: 1 shards the optimizer state\n"
         "                        over each stage's replicas (ZeRO-1) (default: the planner's\n"
         "                        choice, else the program's)\n"
         "  --stop-timeout S      seconds a stop may take before the workers are killed "
         "(default 60)\n"
         "  --max-restarts N      unplanned restarts (failures) allowed within 10 minutes\n"
         "                        before the job fails (default 5; 0: the first failure ends it)\n"
         "  --heartbeat-timeout S a worker that has sent a heartbeat, or is ready, and then\n"
         "                        nothing for S seconds is hung (default 5)\n"
         "  --start-timeout S     how long workers may take to start (imports, data, model,\n"
         "                        rendezvous) before one not ready is a failure; at least 3\n"
         "                        times the slowest start of the job so far (default 300)\n"
         "  --code-dir DIR        working directory of the workers on SSH machines (default:\n"
         "                        the directory mitra run was started in)\n"
         "  --env KEY=VALUE       set a variable for every worker (repeatable)\n"
         "  --launcher ssh|srun   how workers on other machines start: over SSH (default), or\n"
         "                        as Slurm job steps of the allocation (srun)\n"
         "  --known-hosts FILE    SSH host keys (default ~/.ssh/known_hosts)\n"
         "  --identity FILE       SSH private key (default: ssh-agent, then ~/.ssh/id_*)\n"
         "  --preemption-command CMD\n"
         "                        run `sh -c CMD` on every machine every few seconds; exit\n"
         "                        status 0 means the machine will be taken: the job moves off\n"
         "                        it with a planned morph (like `mitra drain`)\n"
         "  --preemption-interval S  between two runs of it on a machine (default 5)\n"
         "  --exclude-stragglers  drain the machine of a rank found to be a straggler\n"
         "  --no-regroup          on a morph, stop every worker and start the next generation\n"
         "                        afresh, instead of keeping the workers whose machine stays\n"
         "  --spares N            keep N idle workers started on each machine, to take a\n"
         "                        failed worker's place without a process start (default 0)\n"
         "  --metrics-port PORT   serve Prometheus metrics at http://ADDR:PORT/metrics\n"
         "  --metrics-address ADDR\n"
         "                        the address they are served on (default 127.0.0.1: this\n"
         "                        machine only; 0.0.0.0: every interface)\n"
         "\n"
         "Ctrl-C (or `mitra stop`) asks every worker to checkpoint and stop after the same\n"
         "step; a second Ctrl-C kills them. `mitra status` shows the job.\n";
}

std::string ReportUsage() {
  return "usage: mitra report RUN_DIR [-o FILE] [--chart-js FILE]\n"
         "\n"
         "Writes one HTML page about the job in RUN_DIR (finished or still running): loss and\n"
         "throughput over steps and wall time, step time per generation, the timeline of\n"
         "generations with every morph, failure and recovery and its downtime, checkpoints,\n"
         "per-rank step times and a summary. The page needs no network: Chart.js is inlined.\n"
         "\n"
         "  -o, --out FILE    where to write it (default RUN_DIR/report.html)\n"
         "  --chart-js FILE   the Chart.js to inline (default " +
         std::string(kDebianChartJs) +
         ",\n"
         "                    from Debian's libjs-chart.js)\n"
         "\n"
         "Exit codes: 0 written, 2 bad usage or input (nothing is written).\n";
}

}  // namespace mitra::cli
