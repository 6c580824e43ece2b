// RunCommand from checked flags to a finished job, with every outside part a fake: the machine
// list and the run directory in memory, the program's describe step a scripted process, the
// workers simulated by FakeTransports on a manual clock. What it checks is RunCommand's own: which
// input is refused before anything starts, what a run directory used before continues, and that
// what arrives while the program describes itself is not lost.
#include "cli/run_command.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/strings.h"
#include "contract/variables.h"
#include "report/metrics.h"
#include "run/run_loop.h"
#include "tests/common/memory_file_system.h"
#include "tests/launcher/scripted_process_runner.h"
#include "tests/run/fake_transports.h"

namespace mitra::cli {
namespace {

using testing::FakeTransports;
using testing::MemoryFileSystem;
using testing::ScriptedProcessRunner;

constexpr char kMachines[] = "/opt/job/machines.txt";
constexpr char kRunDir[] = "/runs/job";
constexpr char kDescribeRecord[] = R"({"event":"describe","segments":2})";

class RunCommandTest : public ::testing::Test {
 protected:
  RunCommandTest() : fake_(&clock_, &events_) {
    fake_.set_time_limit(clock_.MonotonicSeconds() + 600);
    // The program, asked for its shape, prints `describe` (unless a test says otherwise) and
    // exits; then runs the hook a test may set, as if it happened while the program ran.
    describer_.on_start = [this](ScriptedProcessRunner& runner, int index) {
      if (!describe_record_.empty()) runner.Message(index, describe_record_);
      if (while_describing_) while_describing_();
      runner.Exit(index, describe_exit_code_, 0, {"describe: done"});
    };
    options_.machines_path = kMachines;
    options_.batch_size = 16;
    options_.stages = 1;
    options_.max_steps = 4;
    options_.checkpoint_every = 2;
    options_.run_dir = kRunDir;
    options_.program = "/opt/job/train";
    options_.program_args = {"--fast"};

    context_.fs = &fs_;
    context_.clock = &clock_;
    context_.runner = &describer_;
    context_.transports = &fake_;
    context_.events = &events_;
    context_.prepare_loop = [this](run::RunLoopOptions* loop) { fake_.Attach(loop); };
    context_.environment = {{"PATH", "/usr/bin"}};
    context_.working_directory = "/opt/job";
    context_.manager_pid = 4242;
    context_.out = &out_;
    context_.err = &err_;
  }

  int Run(const std::string& machines) {
    fs_.AddFile(kMachines, machines);
    const int code = RunCommand(options_, context_);
    EXPECT_FALSE(fake_.timed_out()) << "the job did not end in simulated time\n" << out_.str()
                                    << err_.str();
    return code;
  }

  std::vector<JsonObject> Events(const std::string& name) const {
    std::vector<JsonObject> found;
    const std::string events = fs_.Contents(std::string(kRunDir) + "/events.jsonl");
    for (const std::string_view line : SplitLines(events)) {
      if (line.empty()) continue;
      Result<JsonObject> record = JsonObject::Parse(line);
      EXPECT_TRUE(record.ok()) << line;
      if (record.ok() && record->GetString("event") == name) found.push_back(*record);
    }
    return found;
  }
  // (generation, world size) of every launch, in order.
  std::vector<std::pair<int, int>> Launches() const {
    std::vector<std::pair<int, int>> launches;
    for (const JsonObject& launch : Events("launch")) {
      launches.emplace_back(static_cast<int>(launch.GetNumber("generation").value_or(-1)),
                            static_cast<int>(launch.GetNumber("world_size").value_or(-1)));
    }
    return launches;
  }
  // Bad input: exit 2, the reason on the terminal, no worker started, the run directory
  // not created.
  void ExpectRefused(int code, const std::string& reason) {
    EXPECT_EQ(code, kExitBadInput) << out_.str() << err_.str();
    EXPECT_NE(err_.str().find("mitra run: "), std::string::npos) << err_.str();
    EXPECT_NE(err_.str().find(reason), std::string::npos) << err_.str();
    EXPECT_EQ(fake_.started(), 0);
    EXPECT_FALSE(fs_.Exists(kRunDir));
  }

  ManualClock clock_;
  MemoryFileSystem fs_;
  run::EventQueue events_;
  FakeTransports fake_;
  ScriptedProcessRunner describer_;
  std::string describe_record_ = kDescribeRecord;
  int describe_exit_code_ = 0;
  std::function<void()> while_describing_;
  RunOptions options_;
  RunContext context_;
  std::ostringstream out_;
  std::ostringstream err_;
};

TEST_F(RunCommandTest, RunsTheJobInTheShapeTheProgramDescribes) {
  EXPECT_EQ(Run("localhost slots=2\n"), kExitOk) << err_.str();

  ASSERT_EQ(describer_.processes.size(), 1u);
  const launcher::ProcessSpec& describe = describer_.processes[0].spec;
  EXPECT_EQ(describe.program, "/opt/job/train");
  EXPECT_EQ(describe.args, std::vector<std::string>({"--fast"}));
  EXPECT_EQ(describe.environment.at(contract::kDescribe), "1");

  EXPECT_NE(out_.str().find("mitra: program has 2 segments"), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("mitra: shape 1 stage x 2 replicas = 2 workers; batch 16 = 8 per "
                            "replica"),
            std::string::npos)
      << out_.str();
  EXPECT_NE(out_.str().find("mitra: done: 4 steps"), std::string::npos) << out_.str();
  ASSERT_EQ(Events("start").size(), 1u);
  const JsonObject start = Events("start")[0];
  EXPECT_EQ(start.GetNumber("segments"), 2);
  EXPECT_EQ(start.GetNumber("manager_pid"), 4242);
  EXPECT_EQ(start.GetString("machines_file"), kMachines);
  EXPECT_EQ(Launches(), (std::vector<std::pair<int, int>>{{0, 2}}));
  EXPECT_EQ(fake_.running(), 0);
  for (const auto& env : fake_.Environments()) {
    EXPECT_EQ(env.at(contract::kMaxSteps), "4");
    EXPECT_EQ(env.at(contract::kCheckpointDir), std::string(kRunDir) + "/checkpoints");
  }
}

TEST_F(RunCommandTest, AResumedRunDirectoryGoesOnCountingGenerations) {
  ASSERT_TRUE(fs_.CreateDirectories(std::string(kRunDir) + "/logs/gen-0").ok());
  ASSERT_TRUE(fs_.CreateDirectories(std::string(kRunDir) + "/logs/gen-1").ok());
  options_.max_steps = 20;
  fake_.At(clock_.MonotonicSeconds() + 6,
           [this] { events_.Push(run::MachineListEdited{"localhost slots=4\n"}); });

  EXPECT_EQ(Run("localhost slots=2\n"), kExitOk) << err_.str();

  // One numbering, the run directory's: records, logs and the terminal agree.
  EXPECT_EQ(Launches(), (std::vector<std::pair<int, int>>{{2, 2}, {3, 4}}));
  EXPECT_TRUE(fs_.Exists(std::string(kRunDir) + "/logs/gen-3"));
  EXPECT_EQ(fake_.Environments().back().at(contract::kGeneration), "3");
  for (const JsonObject& exit : Events("worker_exit")) {
    EXPECT_GE(exit.GetNumber("generation").value_or(-1), 2) << exit.ToJson();
  }
  ASSERT_FALSE(Events("morph").empty());
  EXPECT_EQ(Events("morph")[0].GetNumber("generation"), 2);
  Result<JsonObject> state = JsonObject::Parse(fs_.Contents(std::string(kRunDir) + "/state.json"));
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->GetNumber("generation"), 3);
}

TEST_F(RunCommandTest, AnEditWhileTheProgramDescribesItselfIsKept) {
  options_.max_steps = 20;
  while_describing_ = [this] { events_.Push(run::MachineListEdited{"localhost slots=4\n"}); };
  EXPECT_EQ(Run("localhost slots=2\n"), kExitOk) << err_.str();
  EXPECT_EQ(Launches(), (std::vector<std::pair<int, int>>{{0, 2}, {1, 4}}));
}

TEST_F(RunCommandTest, AStopWhileTheProgramDescribesItselfStartsNothing) {
  while_describing_ = [this] { events_.Push(run::StopRequested{SIGINT}); };
  EXPECT_EQ(Run("localhost slots=2\n"), kExitOk);
  EXPECT_NE(out_.str().find("stopped before the workers were started"), std::string::npos)
      << out_.str();
  EXPECT_EQ(fake_.started(), 0);
  EXPECT_FALSE(fs_.Exists(std::string(kRunDir) + "/events.jsonl"));
}

TEST_F(RunCommandTest, AMachineUnreachableAtStartJoinsOnceItAnswers) {
  options_.max_steps = 60;
  fake_.SetHealthy("node2", false);
  fake_.At(clock_.MonotonicSeconds() + 5, [this] { fake_.SetHealthy("node2", true); });
  EXPECT_EQ(Run("localhost slots=2\nnode2 slots=2\n"), kExitOk) << err_.str();
  EXPECT_NE(err_.str().find("node2 cannot be reached now"), std::string::npos) << err_.str();
  // The shape first printed counts node2's slots, and says so.
  EXPECT_NE(out_.str().find("machines: localhost (2 slots), node2 (2 slots, unreachable now)"),
            std::string::npos)
      << out_.str();
  EXPECT_NE(out_.str().find("that is on every listed machine: the job starts in the shape those "
                            "that answer allow"),
            std::string::npos)
      << out_.str();
  EXPECT_EQ(Launches(), (std::vector<std::pair<int, int>>{{0, 2}, {1, 4}}));
}

TEST_F(RunCommandTest, SlurmMachinesAreTheAllocationsNodesAndAreNotWatched) {
  options_.machines_path = "slurm";
  options_.launcher = Launcher::kSrun;
  context_.environment["SLURM_JOB_ID"] = "812";
  context_.environment["SLURM_JOB_NODELIST"] = "node[1-2]";
  context_.environment["SLURM_TASKS_PER_NODE"] = "2,1";
  std::vector<std::string> expanded;
  context_.expand_slurm_nodes = [&expanded](const std::string& list) {
    expanded.push_back(list);
    return Result<std::vector<std::string>>(std::vector<std::string>{"node1", "node2"});
  };
  bool watched = false;
  context_.watch_machine_list = [&watched](const std::string&, const std::string&) {
    watched = true;
    return Status::Ok();
  };
  EXPECT_EQ(RunCommand(options_, context_), kExitOk) << err_.str();
  EXPECT_EQ(expanded, (std::vector<std::string>{"node[1-2]"}));
  EXPECT_FALSE(watched) << "an allocation's nodes are fixed";
  EXPECT_NE(out_.str().find("mitra: machines: node1 (2 slots), node2 (1 slot)"),
            std::string::npos)
      << out_.str();
  EXPECT_EQ(Launches(), (std::vector<std::pair<int, int>>{{0, 3}}));
  ASSERT_EQ(Events("start").size(), 1u);
  EXPECT_EQ(Events("start")[0].GetString("machines_file"), "slurm");
}

TEST_F(RunCommandTest, SlurmMachinesOutsideAnAllocationAreRefused) {
  options_.machines_path = "slurm";
  ExpectRefused(RunCommand(options_, context_), "SLURM_JOB_NODELIST is not set");
  EXPECT_TRUE(describer_.processes.empty());
}

TEST_F(RunCommandTest, TheSrunLauncherOutsideAnAllocationIsRefused) {
  options_.launcher = Launcher::kSrun;
  fs_.AddFile(kMachines, "node1 slots=2\n");
  ExpectRefused(RunCommand(options_, context_), "SLURM_JOB_ID is not set");
  context_.environment["SLURM_JOB_ID"] = "812";
  fs_.AddFile(kMachines, "alice@node1:2222 slots=2\n");
  ExpectRefused(RunCommand(options_, context_), "names an SSH user or port");
}

TEST_F(RunCommandTest, AMissingMachineListIsRefused) {
  options_.machines_path = "/opt/job/nowhere.txt";
  ExpectRefused(RunCommand(options_, context_), "nowhere.txt");
  EXPECT_TRUE(describer_.processes.empty());
}

TEST_F(RunCommandTest, MoreStagesThanSlotsIsRefusedBeforeTheProgramRuns) {
  options_.stages = 3;
  ExpectRefused(Run("localhost slots=2\n"), "--nstages");
  EXPECT_TRUE(describer_.processes.empty());
}

TEST_F(RunCommandTest, AProgramThatDoesNotDescribeItselfIsRefused) {
  describe_record_.clear();
  ExpectRefused(Run("localhost slots=2\n"), "is it a program built on mitra::worker?");
}

TEST_F(RunCommandTest, AProgramThatFailsToDescribeItselfIsRefusedWithItsLastWords) {
  describe_exit_code_ = 3;
  ExpectRefused(Run("localhost slots=2\n"), "describe: done");
}

TEST_F(RunCommandTest, MoreStagesThanSegmentsIsRefused) {
  options_.stages = 2;
  describe_record_ = R"({"event":"describe","segments":1})";
  ExpectRefused(Run("localhost slots=2\n"), "segment");
}

TEST_F(RunCommandTest, ABadThreadCountInTheEnvironmentIsRefused) {
  context_.environment[contract::kThreads] = "many";
  ExpectRefused(Run("localhost slots=2\n"), "MITRA_THREADS='many'");
}

// The metrics a scrape would read agree with what the run directory's records say happened:
// a grow by a list edit (a morph), a crash and its recovery, periodic checkpoints.
TEST_F(RunCommandTest, TheMetricsFollowTheRunsRecords) {
  report::RunMetrics metrics;
  context_.observer = &metrics;
  options_.max_steps = 20;
  fake_.At(clock_.MonotonicSeconds() + 5.2,
           [this] { events_.Push(run::MachineListEdited{"localhost slots=4\n"}); });
  fake_.At(clock_.MonotonicSeconds() + 12.7, [this] { fake_.Crash(2, 9); });

  EXPECT_EQ(Run("localhost slots=2\n"), kExitOk) << err_.str();

  ASSERT_EQ(Events("morph").size(), 1u);
  ASSERT_EQ(Events("failure").size(), 1u);
  const std::string text = metrics.Text();
  auto value = [&text](const std::string& sample) -> double {
    for (const std::string_view line : SplitLines(text)) {
      if (StartsWith(line, sample + " ")) return std::stod(std::string(line.substr(sample.size())));
    }
    ADD_FAILURE() << "no sample " << sample << " in\n" << text;
    return -1;
  };
  EXPECT_EQ(value("mitra_step"), 20);
  EXPECT_GT(value("mitra_loss"), 0);
  EXPECT_EQ(value("mitra_samples_per_second"), 16);  // a simulated step: 16 samples in 1 s
  EXPECT_EQ(value("mitra_morphs_total"), 1);
  EXPECT_EQ(value("mitra_failures_total"), 1);
  EXPECT_EQ(value("mitra_restarts_total"), 1);
  EXPECT_EQ(value("mitra_checkpoints_total"), static_cast<double>(Events("checkpoint").size()));
  EXPECT_EQ(value("mitra_state{state=\"done\"}"), 1);
  const std::vector<std::pair<int, int>> launches = Launches();
  ASSERT_EQ(launches.size(), 3u);
  EXPECT_EQ(value("mitra_generation"), launches.back().first);
  EXPECT_EQ(value("mitra_world_size"), launches.back().second);
  // One machine, idle once the job is done.
  EXPECT_EQ(value("mitra_machines{state=\"idle\"}"), 1);
  EXPECT_EQ(value("mitra_machines{state=\"in_use\"}") + value("mitra_machines{state=\"failed\"}"),
            0);
  // Each change's downtime, as its first_step record gives it.
  std::map<std::string, double> downtime;
  for (const JsonObject& first : Events("first_step")) {
    downtime[first.GetString("kind").value_or("")] += first.GetNumber("downtime_s").value_or(0);
  }
  ASSERT_EQ(downtime.size(), 2u);
  EXPECT_GT(downtime["morph"], 0);
  EXPECT_GT(downtime["recovery"], 0);
  EXPECT_DOUBLE_EQ(value("mitra_downtime_seconds_total{kind=\"morph\"}"), downtime["morph"]);
  EXPECT_DOUBLE_EQ(value("mitra_downtime_seconds_total{kind=\"recovery\"}"),
                   downtime["recovery"]);
}

TEST_F(RunCommandTest, MetricsThatCannotBeServedAreBadInputBeforeTheProgramRuns) {
  context_.serve_metrics = [] {
    return Status::InvalidArgument("--metrics-port 9400: 127.0.0.1:9400 is taken by another "
                                   "program (`ss -ltnp` shows which): pick a free port with "
                                   "--metrics-port");
  };
  ExpectRefused(Run("localhost slots=2\n"),
                "mitra run: --metrics-port 9400: 127.0.0.1:9400 is taken");
  EXPECT_TRUE(describer_.processes.empty());
}

TEST_F(RunCommandTest, AnotherManagerOnTheRunDirectoryIsRefused) {
  context_.claim_run_dir = [](const std::string& dir) {
    return Status::Unavailable("manager 77 runs " + dir + " already");
  };
  EXPECT_EQ(Run("localhost slots=2\n"), kExitBadInput);
  EXPECT_NE(err_.str().find("manager 77 runs /runs/job already"), std::string::npos) << err_.str();
  EXPECT_EQ(fake_.started(), 0);
}


// ---- RunCommand's steps, each alone ------------------------------------------------------

TEST_F(RunCommandTest, CheckInputsResolvesTheProgramAndTheDirectoriesAndRunsNothing) {
  fs_.AddFile(kMachines, "localhost slots=2\nnode2 slots=1\n");
  options_.run_dir = "job-run";
  Result<CheckedInputs> inputs = CheckInputs(options_, context_);
  ASSERT_TRUE(inputs.ok()) << inputs.status().message();
  EXPECT_EQ(inputs->machines.TotalSlots(), 3);
  EXPECT_EQ(inputs->machines_path, kMachines);
  EXPECT_EQ(inputs->program, "/opt/job/train");
  EXPECT_EQ(inputs->threads, 1);
  EXPECT_EQ(inputs->timeout_s, 30);
  EXPECT_FALSE(inputs->planned);
  EXPECT_EQ(inputs->run_dir, "/opt/job/job-run");
  EXPECT_EQ(inputs->checkpoint_dir, "/opt/job/job-run/checkpoints");
  EXPECT_TRUE(describer_.processes.empty());
  EXPECT_FALSE(fs_.Exists("/opt/job/job-run"));
}

TEST_F(RunCommandTest, DescribeAndPlanAsksTheProgramOnceAndPlansOnItsSegments) {
  fs_.AddFile(kMachines, "localhost slots=2\n");
  Result<CheckedInputs> inputs = CheckInputs(options_, context_);
  ASSERT_TRUE(inputs.ok()) << inputs.status().message();
  Result<ProgramPlan> plan = DescribeAndPlan(options_, *inputs, context_);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(describer_.processes.size(), 1u);
  EXPECT_EQ(plan->description.segments, 2);
  EXPECT_EQ(plan->resume_step, 0);  // no checkpoint: a fresh start
  EXPECT_EQ(plan->plan.stages, 1);
  EXPECT_EQ(plan->plan.replicas, 2);
  EXPECT_EQ(fake_.started(), 0);
}

TEST_F(RunCommandTest, CheckMachinesReturnsTheUnreachableAndCreatesTheCheckpointDirectory) {
  fs_.AddFile(kMachines, "localhost slots=2\nnode2 slots=2\n");
  fake_.SetHealthy("node2", false);
  Result<CheckedInputs> inputs = CheckInputs(options_, context_);
  ASSERT_TRUE(inputs.ok()) << inputs.status().message();
  Result<std::vector<std::string>> unreachable = CheckMachines(*inputs, context_);
  ASSERT_TRUE(unreachable.ok()) << unreachable.status().message();
  EXPECT_EQ(*unreachable, std::vector<std::string>{"node2"});
  EXPECT_NE(err_.str().find("node2 cannot be reached now"), std::string::npos) << err_.str();
  EXPECT_TRUE(fs_.Exists(std::string(kRunDir) + "/checkpoints"));
}

TEST_F(RunCommandTest, TheControllerIsToldTheTimeoutsAndBudgetTheFlagsImply) {
  options_.timeout_s = 100;
  options_.heartbeat_timeout_s = 2;
  options_.max_restarts = 7;
  options_.spares = 2;
  options_.no_regroup = true;
  CheckedInputs inputs;
  inputs.timeout_s = 100;
  ProgramPlan plan;
  plan.description.segments = 6;
  plan.resume_step = 12;
  plan.chunk_size = 4;
  const manager::ControllerOptions o = ControllerOptionsFor(options_, inputs, plan, nullptr, 3);
  EXPECT_EQ(o.segments, 6);
  EXPECT_EQ(o.chunk_size, 4);
  EXPECT_EQ(o.start_step, 12);
  EXPECT_EQ(o.first_generation, 3);
  EXPECT_EQ(o.startup_timeout_s, 300);  // --start-timeout's default, whatever --timeout is
  EXPECT_EQ(o.finish_timeout_s, 200);   // 2 x --timeout, at least 60 s
  EXPECT_EQ(o.max_restarts, 7);
  EXPECT_EQ(o.spares, 0) << "spares are parked workers: none without regrouping";
}

TEST_F(RunCommandTest, TheLoopIsToldWhatEveryLaunchShares) {
  options_.threads = 4;
  options_.no_regroup = true;
  options_.keep_checkpoints = 5;
  CheckedInputs inputs;
  inputs.program = "/opt/job/train";
  inputs.threads = 4;
  inputs.run_dir = kRunDir;
  inputs.checkpoint_dir = "/ckpt";
  ProgramPlan plan;
  plan.resume_step = 8;
  plan.reported = {"step-9 is damaged"};
  records::Job job;
  job.manager_pid = 4242;
  const run::RunLoopOptions o = LoopOptionsFor(options_, inputs, plan, 2, job, context_);
  EXPECT_EQ(o.worker.program, "/opt/job/train");
  EXPECT_EQ(o.settings.placement.generation, 2);
  EXPECT_EQ(o.settings.placement.resume_step, 8);
  EXPECT_EQ(o.settings.placement.checkpoint_dir, "/ckpt");
  EXPECT_EQ(o.settings.placement.keep_checkpoints, 5);
  EXPECT_EQ(o.settings.placement.threads, 4);
  EXPECT_EQ(o.settings.placement.run_dir, kRunDir);
  EXPECT_FALSE(o.regroup);
  EXPECT_EQ(o.reported, plan.reported);
  EXPECT_EQ(o.job.manager_pid, 4242);
}

}  // namespace
}  // namespace mitra::cli
