// LocalProcessRunner against real processes (/bin/sh scripts).
#include "launcher/local_process_runner.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <chrono>

#include "tests/launcher/runner_events.h"
#include "tests/manager/run_helpers.h"

namespace mitra::launcher {
namespace {

using testing::TempDir;

class LocalProcessRunnerTest : public ::testing::Test {
 protected:
  ProcessSpec Shell(const std::string& script) {
    return testing::ShellSpec(script, dir_.Path("out.log"));
  }
  ProcessEventSink Sink() { return events_.Sink(); }
  std::vector<ProcessEvent> UntilExit() { return events_.UntilExit(); }

  TempDir dir_;
  PosixFileSystem fs_;
  testing::RunnerEvents events_;
};

TEST_F(LocalProcessRunnerTest, LogsAllOutputAndForwardsMessagesBeforeTheExit) {
  LocalProcessRunner runner(&fs_);
  Result<StartedProcess> p = runner.Start(
      Shell("echo \"$GREETING\"; echo '@mitra {\"event\":\"ready\"}'; echo oops >&2; exit 3"),
      Sink());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_GT(p->pid, 0);
  const std::vector<ProcessEvent> seen = UntilExit();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].kind, ProcessEvent::Kind::kMessage);
  EXPECT_EQ(seen[0].message, R"({"event":"ready"})");
  EXPECT_EQ(seen[1].kind, ProcessEvent::Kind::kExited);
  EXPECT_EQ(seen[1].exit.exit_code, 3);
  EXPECT_EQ(seen[1].exit.ToString(), "exited with code 3");
  EXPECT_EQ(seen[1].last_lines,
            (std::vector<std::string>{"hello", R"(@mitra {"event":"ready"})", "oops"}));
  EXPECT_EQ(testing::ReadFileOrEmpty(dir_.Path("out.log")),
            "hello\n@mitra {\"event\":\"ready\"}\noops\n");
}

TEST_F(LocalProcessRunnerTest, KeepsOnlyTheLastLines) {
  LocalProcessRunnerOptions options;
  options.tail_lines = 3;
  LocalProcessRunner runner(&fs_, options);
  ASSERT_TRUE(runner.Start(Shell("for i in 1 2 3 4 5; do echo $i; done"), Sink()).ok());
  const std::vector<ProcessEvent> seen = UntilExit();
  ASSERT_FALSE(seen.empty());
  EXPECT_TRUE(seen.back().exit.ok());
  EXPECT_EQ(seen.back().last_lines, (std::vector<std::string>{"3", "4", "5"}));
}

TEST_F(LocalProcessRunnerTest, SignalsItsChildAndReportsTheSignal) {
  LocalProcessRunner runner(&fs_);
  Result<StartedProcess> p = runner.Start(Shell("echo started; exec sleep 30"), Sink());
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(runner.Signal(p->id, SIGTERM).ok());
  const std::vector<ProcessEvent> seen = UntilExit();
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back().exit.signal, SIGTERM);
  EXPECT_EQ(seen.back().exit.ToString(), "was killed by signal SIGTERM");
  EXPECT_TRUE(testing::ProcessGone(p->pid));
  // After the exit, signalling is a harmless no-op: the pid is never signalled again.
  EXPECT_TRUE(runner.Signal(p->id, SIGKILL).ok());
}

TEST_F(LocalProcessRunnerTest, NoticesAnExitWhileADescendantHoldsThePipe) {
  LocalProcessRunnerOptions options;
  options.poll_interval_s = 0.02;
  LocalProcessRunner runner(&fs_, options);
  // The shell exits at once; its background sleep keeps stdout open.
  Result<StartedProcess> p = runner.Start(Shell("sleep 3 & echo bye; exit 5"), Sink());
  ASSERT_TRUE(p.ok());
  const auto start = std::chrono::steady_clock::now();
  const std::vector<ProcessEvent> seen = UntilExit();
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back().exit.exit_code, 5);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

TEST_F(LocalProcessRunnerTest, DestructorKillsWhatIsStillRunning) {
  int pid = 0;
  {
    LocalProcessRunner runner(&fs_);
    Result<StartedProcess> p = runner.Start(Shell("exec sleep 30"), Sink());
    ASSERT_TRUE(p.ok());
    pid = p->pid;
  }
  EXPECT_TRUE(testing::ProcessGone(pid));
  const std::vector<ProcessEvent> seen = UntilExit();
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back().exit.signal, SIGKILL);
}

TEST_F(LocalProcessRunnerTest, GivesTheChildExactlyTheEnvironmentAsked) {
  LocalProcessRunner runner(&fs_);
  ProcessSpec spec = Shell("env | sort");
  spec.environment = {{"ONLY", "this"}};
  ASSERT_TRUE(runner.Start(spec, Sink()).ok());
  const std::vector<ProcessEvent> seen = UntilExit();
  ASSERT_FALSE(seen.empty());
  const std::string log = testing::ReadFileOrEmpty(dir_.Path("out.log"));
  EXPECT_NE(log.find("ONLY=this"), std::string::npos) << log;
  EXPECT_EQ(log.find("GREETING"), std::string::npos) << log;
}

TEST_F(LocalProcessRunnerTest, ResolveProgramExplainsWhatIsWrong) {
  LocalProcessRunner runner(&fs_);
  Result<std::string> sh = runner.ResolveProgram("sh", "/nonexistent:/bin");
  ASSERT_TRUE(sh.ok()) << sh.status().ToString();
  EXPECT_EQ(*sh, "/bin/sh");

  Result<std::string> missing = runner.ResolveProgram(dir_.Path("nope"), "/bin");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("does not exist"), std::string::npos);

  Result<std::string> not_on_path = runner.ResolveProgram("no-such-program-xyz", "/bin");
  ASSERT_FALSE(not_on_path.ok());
  EXPECT_NE(not_on_path.status().message().find("not found on PATH"), std::string::npos);

  const std::string plain = dir_.Write("plain.txt", "not a program");
  Result<std::string> not_exec = runner.ResolveProgram(plain, "/bin");
  ASSERT_FALSE(not_exec.ok());
  EXPECT_NE(not_exec.status().message().find("chmod +x"), std::string::npos);

  Result<std::string> directory = runner.ResolveProgram(dir_.path(), "/bin");
  ASSERT_FALSE(directory.ok());
  EXPECT_NE(directory.status().message().find("is a directory"), std::string::npos);
}

TEST_F(LocalProcessRunnerTest, ALogThatCannotBeOpenedFailsTheStart) {
  LocalProcessRunner runner(&fs_);
  ProcessSpec spec = Shell("true");
  spec.log_path = dir_.Path("missing-dir/rank-0.log");
  EXPECT_FALSE(runner.Start(spec, Sink()).ok());
}

}  // namespace
}  // namespace mitra::launcher
