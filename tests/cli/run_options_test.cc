#include "cli/run_options.h"

#include <gtest/gtest.h>

namespace mitra::cli {
namespace {

Command ParseOk(const std::vector<std::string>& args) {
  Result<Command> c = ParseCommandLine(args);
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? *c : Command{};
}

std::string ParseError(const std::vector<std::string>& args) {
  Result<Command> c = ParseCommandLine(args);
  EXPECT_FALSE(c.ok());
  if (!c.ok()) {
    EXPECT_EQ(c.status().code(), Status::Code::kInvalidArgument);
  }
  return c.ok() ? "" : c.status().message();
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(RunOptions, ParsesEveryFlagAndTheProgram) {
  const Command c = ParseOk({"run",
                             "--machines",
                             "m.txt",
                             "--batch-size=64",
                             "--nstages",
                             "2",
                             "--chunk-size",
                             "4",
                             "--gpus-per-node",
                             "8",
                             "--max-steps",
                             "100",
                             "--run-dir",
                             "out",
                             "--threads",
                             "2",
                             "--timeout",
                             "12.5",
                             "--stop-timeout",
                             "5",
                             "--",
                             "./train",
                             "--lr",
                             "0.1",
                             "--"});
  ASSERT_EQ(c.kind, CommandKind::kRun);
  const RunOptions& o = c.run;
  EXPECT_EQ(o.machines_path, "m.txt");
  EXPECT_EQ(o.batch_size, 64);
  EXPECT_EQ(o.stages, 2);
  EXPECT_EQ(o.chunk_size, 4);
  EXPECT_EQ(o.gpus_per_node, 8);
  EXPECT_EQ(o.max_steps, 100);
  EXPECT_EQ(o.run_dir, "out");
  EXPECT_EQ(o.threads, 2);
  EXPECT_EQ(o.timeout_s, 12.5);
  EXPECT_EQ(o.stop_timeout_s, 5);
  EXPECT_EQ(o.program, "./train");
  EXPECT_EQ(o.program_args, (std::vector<std::string>{"--lr", "0.1", "--"}));
}

TEST(RunOptions, PrecisionIsOneOfTheThreeAndReachesTheWorkers) {
  const std::vector<std::string> base{"run", "--machines", "m.txt", "--batch-size", "8"};
  auto with = [&](const std::string& precision) {
    auto args = base;
    args.insert(args.end(), {"--precision", precision, "--", "./train"});
    return args;
  };
  EXPECT_EQ(ParseOk(with("bf16")).run.precision, "bf16");
  EXPECT_EQ(ParseOk({"run", "--machines", "m.txt", "--batch-size", "8", "--", "./t"}).run.precision,
            "");
  EXPECT_EQ(ParseError(with("fp8")),
            "mitra run: --precision 'fp8' is not a precision: use fp32 (the default), bf16 or "
            "fp16");
}

TEST(RunOptions, TheLauncherIsSshUnlessSrunIsAsked) {
  const RunOptions ssh = ParseOk({"run", "--machines", "m", "--batch-size", "8", "--", "p"}).run;
  EXPECT_EQ(ssh.launcher, Launcher::kSsh);
  EXPECT_FALSE(ssh.gpus_per_node_given);
  const RunOptions srun = ParseOk({"run", "--machines", "slurm", "--launcher", "srun",
                                   "--gpus-per-node", "4", "--batch-size", "8", "--", "p"})
                              .run;
  EXPECT_EQ(srun.launcher, Launcher::kSrun);
  EXPECT_EQ(srun.machines_path, "slurm");
  EXPECT_TRUE(srun.gpus_per_node_given);
  EXPECT_EQ(srun.gpus_per_node, 4);
  const std::string error = ParseError(
      {"run", "--machines", "m", "--launcher", "mpirun", "--batch-size", "8", "--", "p"});
  EXPECT_TRUE(Contains(error, "--launcher 'mpirun' is not a launcher")) << error;
  EXPECT_TRUE(Contains(error, "--launcher srun")) << error;
}

TEST(RunOptions, HasDefaults) {
  const RunOptions o = ParseOk({"run", "--machines", "m", "--batch-size", "8", "--", "p"}).run;
  EXPECT_EQ(o.stages, 0);  // planned
  EXPECT_TRUE(o.profile_dir.empty());
  EXPECT_EQ(o.chunk_size, 0);
  EXPECT_EQ(o.gpus_per_node, 1);
  // Not given: the program's own (one spelling, std::nullopt, down to the worker).
  EXPECT_EQ(o.max_steps, std::nullopt);
  EXPECT_EQ(o.checkpoint_every, std::nullopt);
  EXPECT_EQ(o.keep_checkpoints, std::nullopt);
  EXPECT_EQ(o.zero, std::nullopt);
  EXPECT_EQ(o.run_dir, "mitra-run");
  EXPECT_EQ(o.threads, 0);
  EXPECT_EQ(o.timeout_s, 0);
  EXPECT_EQ(o.stop_timeout_s, 60);
  EXPECT_TRUE(o.program_args.empty());
}

TEST(RunOptions, UnknownFlagsSuggestTheNearestOne) {
  EXPECT_EQ(ParseError({"run", "--batch", "8"}),
            "mitra run: unknown flag '--batch'; did you mean --batch-size? See `mitra run "
            "--help`");
  EXPECT_EQ(ParseError({"run", "--frobnicate"}),
            "mitra run: unknown flag '--frobnicate'; see `mitra run --help`");
}

TEST(RunOptions, TakesTheProfileToPlanFrom) {
  const RunOptions o =
      ParseOk({"run", "--machines", "m", "--batch-size", "8", "--profile", "prof", "--", "p"}).run;
  EXPECT_EQ(o.profile_dir, "prof");
  EXPECT_TRUE(Contains(ParseError({"run", "--profile="}), "--profile '' is not a directory name"));
}

TEST(RunOptions, RequiresTheSeparatorAndAProgram) {
  EXPECT_TRUE(Contains(ParseError({"run", "--machines", "m", "--batch-size", "8"}),
                       "no program given; end the command with `-- PROGRAM [ARGS...]`"));
  EXPECT_TRUE(Contains(ParseError({"run", "--machines", "m", "--batch-size", "8", "--"}),
                       "no program after `--`"));
  EXPECT_TRUE(Contains(ParseError({"run", "--machines", "m", "--batch-size", "8", "./train"}),
                       "unexpected argument './train'; put the program"));
}

TEST(RunOptions, RequiresMachinesAndBatchSize) {
  EXPECT_TRUE(
      Contains(ParseError({"run", "--batch-size", "8", "--", "p"}), "--machines is required"));
  EXPECT_TRUE(
      Contains(ParseError({"run", "--machines", "m", "--", "p"}), "--batch-size is required"));
}

TEST(RunOptions, RejectsBadNumbers) {
  const std::vector<std::string> base = {"run", "--machines", "m"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    if (std::find(args.begin(), args.end(), "--batch-size") == args.end()) {
      args.insert(args.end(), {"--batch-size", "8"});
    }
    args.insert(args.end(), {"--", "p"});
    return ParseError(args);
  };
  EXPECT_EQ(with({"--batch-size", "abc"}),
            "mitra run: --batch-size 'abc' is not a whole number >= 1 (e.g. --batch-size 64)");
  EXPECT_TRUE(Contains(with({"--batch-size", "0"}), "is not a whole number >= 1"));
  EXPECT_TRUE(Contains(with({"--chunk-size", "0"}), "--chunk-size '0' is not a whole number"));
  EXPECT_TRUE(Contains(with({"--nstages", "-1"}), "--nstages '-1'"));
  EXPECT_TRUE(Contains(with({"--max-steps", "1.5"}), "is not a whole number >= 0"));
  EXPECT_TRUE(Contains(with({"--timeout", "0"}), "is not a positive number of seconds"));
  EXPECT_TRUE(Contains(with({"--threads", "99999999999"}), "--threads"));
  EXPECT_TRUE(Contains(with({"--nstages"}), "--nstages needs a value"));
}

TEST(RunOptions, AnUnknownCommandNamesTheCommands) {
  EXPECT_TRUE(Contains(ParseError({"frob"}), "unknown command 'frob'"));
  EXPECT_TRUE(Contains(ParseError({"frob"}), "run, profile, plan, checkpoint, report, status, stop"));
}

TEST(RunOptions, ElasticFlags) {
  const Command c = ParseOk({"run", "--machines", "m", "--batch-size", "8", "--max-restarts", "0",
                             "--heartbeat-timeout", "2.5", "--env", "A_B=x=y", "--env", "C=",
                             "--code-dir", "/srv/t", "--known-hosts", "kh", "--identity", "id",
                             "--", "prog"});
  EXPECT_EQ(c.run.max_restarts, 0);
  EXPECT_EQ(c.run.heartbeat_timeout_s, 2.5);
  ASSERT_EQ(c.run.env.size(), 2u);
  EXPECT_EQ(c.run.env[0], std::make_pair(std::string("A_B"), std::string("x=y")));
  EXPECT_EQ(c.run.env[1], std::make_pair(std::string("C"), std::string("")));
  EXPECT_EQ(c.run.code_dir, "/srv/t");
  EXPECT_EQ(c.run.known_hosts, "kh");
  EXPECT_EQ(c.run.identity, "id");
  EXPECT_TRUE(Contains(ParseError({"run", "--machines", "m", "--batch-size", "8", "--env",
                                   "1X=2", "--", "p"}),
                       "--env '1X=2' is not KEY=VALUE"));
  EXPECT_TRUE(Contains(ParseError({"run", "--machines", "m", "--batch-size", "8",
                                   "--max-restarts", "-1", "--", "p"}),
                       "--max-restarts"));
}

TEST(RunOptions, MetricsPortAndAddress) {
  const RunOptions plain = ParseOk({"run", "--machines", "m", "--batch-size", "8", "--", "p"}).run;
  EXPECT_EQ(plain.metrics_port, 0);  // no metrics served
  EXPECT_EQ(plain.metrics_address, "127.0.0.1");
  const RunOptions o = ParseOk({"run", "--machines", "m", "--batch-size", "8", "--metrics-port",
                                "9400", "--metrics-address=0.0.0.0", "--", "p"})
                           .run;
  EXPECT_EQ(o.metrics_port, 9400);
  EXPECT_EQ(o.metrics_address, "0.0.0.0");
  EXPECT_EQ(ParseError({"run", "--machines", "m", "--batch-size", "8", "--metrics-port",
                        "70000", "--", "p"}),
            "mitra run: --metrics-port '70000' is not a whole number from 1 to 65535 (e.g. "
            "--metrics-port 9400)");
  EXPECT_TRUE(Contains(ParseError({"run", "--machines", "m", "--batch-size", "8",
                                   "--metrics-port", "0", "--", "p"}),
                       "--metrics-port '0' is not a whole number >= 1"));
  EXPECT_EQ(ParseError({"run", "--machines", "m", "--batch-size", "8", "--metrics-address",
                        "0.0.0.0", "--", "p"}),
            "mitra run: --metrics-address says where --metrics-port serves the metrics: add "
            "--metrics-port PORT (e.g. --metrics-port 9400), or leave out --metrics-address");
  EXPECT_TRUE(Contains(RunUsage(), "--metrics-port PORT"));
  EXPECT_TRUE(Contains(RunUsage(), "--metrics-address ADDR"));
}

TEST(RunOptions, TheProgramsArgumentsAreNeverMitras) {
  const RunOptions o = ParseOk({"run", "--machines", "m", "--batch-size", "8", "--", "./train",
                                "--batch-size", "abc", "--help", "--frob", "--"})
                           .run;
  EXPECT_EQ(o.batch_size, 8);
  EXPECT_EQ(o.program, "./train");
  EXPECT_EQ(o.program_args,
            (std::vector<std::string>{"--batch-size", "abc", "--help", "--frob", "--"}));
}

TEST(RunOptions, CheckpointCommands) {
  const Command list = ParseOk({"checkpoint", "list", "runs/a/checkpoints"});
  ASSERT_EQ(list.kind, CommandKind::kCheckpoint);
  EXPECT_EQ(list.checkpoint.action, "list");
  EXPECT_EQ(list.checkpoint.dir, "runs/a/checkpoints");
  const Command out = ParseOk({"checkpoint", "export", "ckpt", "model.pt"});
  EXPECT_EQ(out.checkpoint.action, "export");
  EXPECT_EQ(out.checkpoint.out, "model.pt");
  EXPECT_EQ(ParseOk({"checkpoint", "--help"}).help_text, CheckpointUsage());
  EXPECT_EQ(ParseError({"checkpoint", "list"}), CheckpointUsage());
  EXPECT_EQ(ParseError({"checkpoint", "verify", "d", "extra"}), CheckpointUsage());
  EXPECT_EQ(ParseError({"checkpoint", "show", "d"}), CheckpointUsage());
  EXPECT_EQ(ParseError({"checkpoint", "list", "d", "--all"}),
            "mitra checkpoint: unknown flag '--all'; see `mitra checkpoint --help`");
}

TEST(RunOptions, ReportCommand) {
  const Command plain = ParseOk({"report", "runs/a"});
  ASSERT_EQ(plain.kind, CommandKind::kReport);
  EXPECT_EQ(plain.report.run_dir, "runs/a");
  EXPECT_EQ(plain.report.out, "");
  EXPECT_EQ(plain.report.chart_js, kDebianChartJs);
  EXPECT_EQ(ParseOk({"report", "runs/a", "-o", "r.html"}).report.out, "r.html");
  EXPECT_EQ(ParseOk({"report", "--out=r.html", "runs/a"}).report.out, "r.html");
  EXPECT_EQ(ParseOk({"report", "runs/a", "--chart-js", "c.js"}).report.chart_js, "c.js");
  EXPECT_EQ(ParseOk({"report", "--help"}).help_text, ReportUsage());
  EXPECT_EQ(ParseError({"report"}),
            "mitra report: no run directory given; e.g. mitra report mitra-run (see `mitra "
            "report --help`)");
  EXPECT_EQ(ParseError({"report", "runs/a", "-o"}),
            "mitra report: -o needs a value; see `mitra report --help`");
  EXPECT_EQ(ParseError({"report", "--out", "--chart-js", "c.js", "runs/a"}),
            "mitra report: --out needs a value; see `mitra report --help`");
  EXPECT_EQ(ParseError({"report", "runs/a", "--chart", "x"}),
            "mitra report: unknown flag '--chart'; did you mean --chart-js? See `mitra report "
            "--help`");
  EXPECT_TRUE(Contains(ParseError({"report", "runs/a", "runs/b"}), "unexpected argument 'runs/b'"));
}

TEST(RunOptions, HelpAndVersion) {
  EXPECT_EQ(ParseOk({"--help"}).kind, CommandKind::kHelp);
  const Command run_help = ParseOk({"run", "--machines", "m", "--help"});
  EXPECT_EQ(run_help.kind, CommandKind::kHelp);
  EXPECT_TRUE(Contains(run_help.help_text, "--chunk-size"));
  EXPECT_EQ(ParseOk({"--version"}).kind, CommandKind::kVersion);
  EXPECT_FALSE(ParseCommandLine({}).ok());
}

}  // namespace
}  // namespace mitra::cli
