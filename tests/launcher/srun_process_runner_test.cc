// SrunProcessRunner's command lines and its reading of srun, with the processes it starts
// scripted (ScriptedProcessRunner) and the commands it runs (scancel, srun true) recorded by a
// fake. tests/slurm/slurm_run_test.cc runs it against a real Slurm.
#include "launcher/srun_process_runner.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <string>
#include <vector>

#include "launcher/shell_quote.h"
#include "tests/launcher/scripted_process_runner.h"

namespace mitra::launcher {
namespace {

using testing::ScriptedProcessRunner;

SrunOptions Options() {
  SrunOptions options;
  options.job_id = "812";
  options.node = "gpu07";
  options.environment = {{"PATH", "/usr/bin"}, {"SLURM_CONF", "/etc/slurm/slurm.conf"}};
  return options;
}

ProcessSpec Spec() {
  ProcessSpec spec;
  spec.program = "/opt/train";
  spec.args = {"--lr", "0.1; rm -rf /"};
  spec.environment = {{"MITRA_RANK", "3"}, {"PATH", "/usr/bin"}};
  spec.working_directory = "/srv/job";
  spec.log_path = "/runs/logs/rank-3.log";
  return spec;
}

TEST(SrunCommandLine, RunsOneTaskOnTheNodeAsAnOverlappingStepOfTheAllocation) {
  EXPECT_EQ(SrunArguments(Options(), "/srv/job", {"true"}),
            (std::vector<std::string>{"--jobid=812", "--nodes=1", "--ntasks=1", "--nodelist=gpu07",
                                      "--overlap", "--export=ALL", "--input=none",
                                      "--chdir=/srv/job", "--", "true"}));
  const std::vector<std::string> no_directory = SrunArguments(Options(), "", {"true"});
  EXPECT_EQ(std::count(no_directory.begin(), no_directory.end(), "--chdir=/srv/job"), 0);
}

TEST(SrunCommandLine, TheTaskReportsItsStepThenExecsTheProgramWithExactlyItsEnvironment) {
  Result<std::vector<std::string>> command = SrunTaskCommand(Spec());
  ASSERT_TRUE(command.ok()) << command.status().ToString();
  ASSERT_GE(command->size(), 4u);
  EXPECT_EQ((*command)[0], "/bin/sh");
  EXPECT_EQ((*command)[1], "-c");
  EXPECT_NE((*command)[2].find("$SLURM_STEP_ID"), std::string::npos);
  EXPECT_NE((*command)[2].find("exec \"$@\""), std::string::npos);
  // Everything after the script is an argument of `exec "$@"`: no shell reads the spec.
  EXPECT_EQ(std::vector<std::string>(command->begin() + 3, command->end()),
            (std::vector<std::string>{"mitra-srun", "env", "-i", "MITRA_RANK=3", "PATH=/usr/bin",
                                      "/opt/train", "--lr", "0.1; rm -rf /"}));
}

// A secret travels in srun's environment (SrunProcessRunner::Start adds it there) and reaches
// the program through a here-document the task's shell expands: its value is on no command line.
TEST(SrunCommandLine, ASecretIsReadFromTheTasksEnvironmentNotTheCommandLine) {
  ProcessSpec spec = Spec();
  spec.environment["MITRA_JOB_TOKEN"] = "0123abcd";
  spec.secrets = {"MITRA_JOB_TOKEN"};
  Result<std::vector<std::string>> command = SrunTaskCommand(spec);
  ASSERT_TRUE(command.ok()) << command.status().ToString();
  for (const std::string& word : *command) EXPECT_EQ(word.find("0123abcd"), std::string::npos) << word;
  EXPECT_NE((*command)[2].find("<<MITRA_SECRETS\n$MITRA_JOB_TOKEN\nMITRA_SECRETS"), std::string::npos)
      << (*command)[2];
  const std::vector<std::string> reader = SecretReader({"MITRA_JOB_TOKEN"});
  EXPECT_EQ(std::vector<std::string>(command->begin() + 3, command->end()),
            (std::vector<std::string>{"mitra-srun", "env", "-i", "MITRA_RANK=3", "PATH=/usr/bin",
                                      reader[0], reader[1], reader[2], "/opt/train", "--lr",
                                      "0.1; rm -rf /"}));
}

TEST(SrunCommandLine, RefusesWhatEnvWouldMisread) {
  ProcessSpec bad_name = Spec();
  bad_name.environment["A=B"] = "1";
  EXPECT_EQ(SrunTaskCommand(bad_name).status().code(), Status::Code::kInvalidArgument);
  ProcessSpec bad_program = Spec();
  bad_program.program = "/opt/x=1/train";
  EXPECT_EQ(SrunTaskCommand(bad_program).status().code(), Status::Code::kInvalidArgument);
}

TEST(SrunTaskReport, IsReadFromItsMessageOnly) {
  const std::optional<SrunTask> task =
      ParseSrunTaskMessage(R"({"event":"srun_task","step":"812.4","pid":5150})");
  ASSERT_TRUE(task.has_value());
  EXPECT_EQ(task->step, "812.4");
  EXPECT_EQ(task->pid, 5150);
  EXPECT_FALSE(ParseSrunTaskMessage(R"({"event":"ready"})").has_value());
  EXPECT_FALSE(ParseSrunTaskMessage(R"({"event":"srun_task","step":"812.4"})").has_value());
  EXPECT_FALSE(ParseSrunTaskMessage("not json").has_value());
}

ExitStatus Exited(int code) {
  ExitStatus exit;
  exit.exit_code = code;
  return exit;
}

TEST(SrunExit, ATaskKilledBySignalIsReportedAsThatSignal) {
  const ExitStatus exit = TaskExitFromSrun(Exited(137), {"srun: error: gpu07: task 0: Killed"});
  EXPECT_EQ(exit.signal, SIGKILL);
  EXPECT_FALSE(exit.lost);
  EXPECT_EQ(
      TaskExitFromSrun(Exited(139), {"srun: error: gpu07: task 0: Segmentation fault"}).signal,
      SIGSEGV);
}

TEST(SrunExit, AnExitCodeStaysAnExitCodeEvenAbove128) {
  const ExitStatus three =
      TaskExitFromSrun(Exited(3), {"srun: error: gpu07: task 0: Exited with exit code 3"});
  EXPECT_EQ(three.exit_code, 3);
  EXPECT_EQ(three.signal, 0);
  const ExitStatus high =
      TaskExitFromSrun(Exited(137), {"srun: error: gpu07: task 0: Exited with exit code 137"});
  EXPECT_EQ(high.exit_code, 137);
  EXPECT_EQ(high.signal, 0);
  EXPECT_TRUE(TaskExitFromSrun(Exited(0), {}).ok());
}

TEST(SrunExit, ANodeFailureOrAKilledSrunIsALostMachine) {
  EXPECT_TRUE(TaskExitFromSrun(Exited(1), {"srun: error: Node failure on gpu07",
                                           "srun: error: gpu07: task 0: Killed"})
                  .lost);
  ExitStatus srun_killed;
  srun_killed.signal = SIGKILL;
  EXPECT_TRUE(TaskExitFromSrun(srun_killed, {}).lost);
}

// The runner on scripted srun processes; scancel and `srun true` recorded.
class SrunRunnerTest : public ::testing::Test {
 protected:
  SrunRunnerTest()
      : runner_(Options(), &local_,
                [this](const std::vector<std::string>& argv,
                       const std::map<std::string, std::string>& environment, double) {
                  commands_.push_back(argv);
                  EXPECT_EQ(environment.at("SLURM_CONF"), "/etc/slurm/slurm.conf");
                  return command_result_;
                }) {}

  // srun, started, has its task report step 812.`step` as pid `pid`.
  void ReportOnStart(int step, int pid) {
    local_.on_start = [step, pid](ScriptedProcessRunner& runner, int index) {
      runner.Message(index, R"({"event":"srun_task","step":"812.)" + std::to_string(step) +
                                R"(","pid":)" + std::to_string(pid) + "}");
    };
  }
  ProcessEventSink Sink() {
    return [this](ProcessEvent event) { events_.push_back(std::move(event)); };
  }

  ScriptedProcessRunner local_;
  std::vector<std::vector<std::string>> commands_;
  Result<CommandResult> command_result_ = CommandResult{};
  SrunProcessRunner runner_;
  std::vector<ProcessEvent> events_;
};

TEST_F(SrunRunnerTest, StartsSrunLocallyAndReturnsTheTasksPidOnTheNode) {
  ReportOnStart(4, 5150);
  Result<StartedProcess> started = runner_.Start(Spec(), Sink());
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  EXPECT_EQ(started->pid, 5150);
  ASSERT_EQ(local_.processes.size(), 1u);
  const ProcessSpec& srun = local_.processes[0].spec;
  EXPECT_EQ(srun.program, "srun");
  EXPECT_EQ(srun.environment, Options().environment);  // srun's own, not the worker's
  EXPECT_EQ(srun.log_path, "/runs/logs/rank-3.log");
  EXPECT_TRUE(srun.working_directory.empty());
  EXPECT_NE(std::find(srun.args.begin(), srun.args.end(), "--chdir=/srv/job"), srun.args.end());
  EXPECT_NE(std::find(srun.args.begin(), srun.args.end(), "MITRA_RANK=3"), srun.args.end());
  EXPECT_TRUE(events_.empty()) << "the step's report is the runner's, not the manager's";

  local_.Message(0, R"({"event":"ready"})");
  local_.Exit(0, 137, 0, {"srun: error: gpu07: task 0: Killed"});
  ASSERT_EQ(events_.size(), 2u);
  EXPECT_EQ(events_[0].message, R"({"event":"ready"})");
  EXPECT_EQ(events_[1].kind, ProcessEvent::Kind::kExited);
  EXPECT_EQ(events_[1].exit.signal, SIGKILL);
}

// srun runs with --input=none: nothing reaches the task, though the local srun has a stdin.
TEST_F(SrunRunnerTest, CannotSendLines) {
  ReportOnStart(4, 5150);
  Result<StartedProcess> started = runner_.Start(Spec(), Sink());
  ASSERT_TRUE(started.ok());
  ASSERT_TRUE(local_.CanSendLines());
  EXPECT_FALSE(runner_.CanSendLines());
  EXPECT_EQ(runner_.SendLine(started->id, "placement").code(), Status::Code::kAborted);
  EXPECT_TRUE(local_.processes[0].lines.empty());
}

TEST_F(SrunRunnerTest, SignalsGoToExactlyTheStepWithScancel) {
  ReportOnStart(4, 5150);
  Result<StartedProcess> started = runner_.Start(Spec(), Sink());
  ASSERT_TRUE(started.ok());
  EXPECT_TRUE(runner_.Signal(started->id, SIGUSR1).ok());
  EXPECT_TRUE(runner_.Signal(started->id, SIGKILL).ok());
  EXPECT_EQ(commands_, (std::vector<std::vector<std::string>>{
                           {"scancel", "--signal=" + std::to_string(SIGUSR1), "812.4"},
                           {"scancel", "--signal=" + std::to_string(SIGKILL), "812.4"}}));
  EXPECT_TRUE(local_.signals.empty()) << "srun itself is never signalled";

  local_.Exit(0, 0);
  EXPECT_TRUE(runner_.Signal(started->id, SIGKILL).ok());
  EXPECT_EQ(commands_.size(), 2u) << "nothing is sent to a step that has ended";
}

TEST_F(SrunRunnerTest, AScancelThatFailsIsAnErrorNamingTheStep) {
  ReportOnStart(4, 5150);
  Result<StartedProcess> started = runner_.Start(Spec(), Sink());
  ASSERT_TRUE(started.ok());
  CommandResult refused;
  refused.exit_code = 1;
  refused.err = "scancel: error: Kill job error on job id 812.4: Access/permission denied\n";
  command_result_ = refused;
  const Status s = runner_.Signal(started->id, SIGUSR1);
  EXPECT_EQ(s.code(), Status::Code::kUnavailable);
  EXPECT_NE(s.message().find("812.4"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("permission denied"), std::string::npos) << s.message();
}

TEST_F(SrunRunnerTest, AStepThatEndsBeforeItsReportIsAFailedStartWithSrunsWords) {
  local_.on_start = [](ScriptedProcessRunner& runner, int index) {
    runner.Exit(index, 1, 0,
                {"srun: error: Unable to create step for job 812: Invalid node name specified"});
  };
  Result<StartedProcess> started = runner_.Start(Spec(), Sink());
  ASSERT_FALSE(started.ok());
  EXPECT_EQ(started.status().code(), Status::Code::kUnavailable);
  EXPECT_NE(started.status().message().find("gpu07"), std::string::npos);
  EXPECT_NE(started.status().message().find("Invalid node name"), std::string::npos)
      << started.status().message();
  EXPECT_TRUE(events_.empty()) << "a failed start delivers no event";
}

TEST_F(SrunRunnerTest, AStepThatNeverReportsTimesOutAndSrunIsAskedToEndIt) {
  SrunOptions options = Options();
  options.start_timeout_s = 0;
  SrunProcessRunner runner(options, &local_, [](const auto&, const auto&, double) {
    return Result<CommandResult>(CommandResult{});
  });
  Result<StartedProcess> started = runner.Start(Spec(), Sink());
  ASSERT_FALSE(started.ok());
  EXPECT_EQ(started.status().code(), Status::Code::kTimeout);
  EXPECT_EQ(local_.signals, (std::vector<std::pair<int, int>>{{0, SIGTERM}}));
  local_.Exit(0, 137, 0, {"srun: error: gpu07: task 0: Killed"});
  EXPECT_TRUE(events_.empty());
}

TEST_F(SrunRunnerTest, AHealthCheckIsSrunTrueOnTheNode) {
  EXPECT_TRUE(runner_.Check(10).ok());
  ASSERT_EQ(commands_.size(), 1u);
  std::vector<std::string> expected{"srun"};
  for (const std::string& a : SrunArguments(Options(), "", {"true"})) expected.push_back(a);
  EXPECT_EQ(commands_[0], expected);

  CommandResult down;
  down.exit_code = 1;
  down.err = "srun: error: Unable to create step for job 812: Requested nodes are busy\n";
  command_result_ = down;
  const Status s = runner_.Check(10);
  EXPECT_EQ(s.code(), Status::Code::kUnavailable);
  EXPECT_NE(s.message().find("gpu07"), std::string::npos);
  EXPECT_NE(s.message().find("Requested nodes are busy"), std::string::npos) << s.message();
}

TEST_F(SrunRunnerTest, AnOrphanIsKilledOnItsNodeOnlyIfItIsAWorkerOfTheRun) {
  EXPECT_TRUE(runner_.KillOrphan(5150, "/runs/job").ok());
  ASSERT_EQ(commands_.size(), 1u);
  const std::vector<std::string>& argv = commands_[0];
  ASSERT_GE(argv.size(), 3u);
  EXPECT_NE(std::find(argv.begin(), argv.end(), "--nodelist=gpu07"), argv.end());
  EXPECT_EQ(std::vector<std::string>(argv.end() - 2, argv.end()),
            (std::vector<std::string>{"/runs/job", "5150"}));
  const std::string& script = argv[argv.size() - 4];
  EXPECT_NE(script.find("MITRA_RUN_DIR=$1"), std::string::npos) << script;
  EXPECT_NE(script.find("kill -KILL"), std::string::npos) << script;
}

}  // namespace
}  // namespace mitra::launcher
