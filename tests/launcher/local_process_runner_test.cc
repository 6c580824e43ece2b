// LocalProcessRunner against real processes (/bin/sh scripts).
#include "launcher/local_process_runner.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <thread>

#include "tests/launcher/runner_events.h"
#include "tests/common/run_helpers.h"

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

// LibTorch's `what():` came 8th of 28 lines: it is kept, though the tail holds only 20.
TEST_F(LocalProcessRunnerTest, KeepsTheErrorLinesThatScrolledOutOfTheTail) {
  LocalProcessRunner runner(&fs_);
  ASSERT_TRUE(runner
                  .Start(Shell("for i in 1 2 3 4 5 6; do echo loading $i; done; "
                               "echo \"terminate called after throwing an instance of "
                               "'c10::Error'\" >&2; echo '  what():  boom' >&2; "
                               "for i in $(seq 0 19); do echo \"frame #$i\" >&2; done; exit 134"),
                         Sink())
                  .ok());
  const std::vector<ProcessEvent> seen = UntilExit();
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back().exit.exit_code, 134);
  EXPECT_EQ(seen.back().earlier_errors,
            (std::vector<std::string>{"terminate called after throwing an instance of 'c10::Error'",
                                      "  what():  boom"}));
  ASSERT_EQ(seen.back().last_lines.size(), 20u);
  EXPECT_EQ(seen.back().last_lines.front(), "frame #0");
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

TEST_F(LocalProcessRunnerTest, SendsLinesToTheChildsStdinInOrder) {
  LocalProcessRunner runner(&fs_);
  EXPECT_TRUE(runner.CanSendLines());
  Result<StartedProcess> p = runner.Start(Shell(testing::EchoLinesScript(2)), Sink());
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(runner.SendLine(p->id, "one").ok());
  ASSERT_TRUE(runner.SendLine(p->id, "two").ok());
  const std::vector<ProcessEvent> seen = UntilExit();
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].message, R"({"got":"one"})");
  EXPECT_EQ(seen[1].message, R"({"got":"two"})");
  EXPECT_TRUE(seen[2].exit.ok()) << seen[2].exit.ToString();
}

TEST_F(LocalProcessRunnerTest, ALineToAnExitedProcessIsUnavailable) {
  LocalProcessRunner runner(&fs_);
  Result<StartedProcess> p = runner.Start(Shell("exit 0"), Sink());
  ASSERT_TRUE(p.ok());
  ASSERT_FALSE(UntilExit().empty());
  const Status sent = runner.SendLine(p->id, "late");
  EXPECT_EQ(sent.code(), Status::Code::kUnavailable);
  EXPECT_NE(sent.message().find("process " + std::to_string(p->id)), std::string::npos)
      << sent.message();
  EXPECT_NE(sent.message().find("exited"), std::string::npos) << sent.message();
}

// The write itself meets the closed pipe (EPIPE), which raises SIGPIPE: it must not reach this
// process, whose SIGPIPE disposition is the default (terminate), as a test binary's is.
TEST_F(LocalProcessRunnerTest, ALineToAClosedStdinIsUnavailableAndRaisesNoSigpipe) {
  LocalProcessRunner runner(&fs_);
  Result<StartedProcess> p =
      runner.Start(Shell("exec 0<&-; echo '@mitra {\"closed\":true}'; exec sleep 30"), Sink());
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(events_.WaitForMessage(R"({"closed":true})"));
  const Status sent = runner.SendLine(p->id, "nobody reads this");
  EXPECT_EQ(sent.code(), Status::Code::kUnavailable);
  EXPECT_NE(sent.message().find("standard input is closed"), std::string::npos) << sent.message();
  sigset_t pending;
  sigpending(&pending);
  EXPECT_EQ(sigismember(&pending, SIGPIPE), 0) << "SIGPIPE left pending";
  ASSERT_TRUE(runner.Signal(p->id, SIGKILL).ok());
  ASSERT_FALSE(UntilExit().empty());
}

TEST_F(LocalProcessRunnerTest, ALineLongerThanThePipeArrivesWhole) {
  LocalProcessRunner runner(&fs_);
  const std::string got = dir_.Path("got.txt");
  Result<StartedProcess> p = runner.Start(Shell("head -n 1 > '" + got + "'"), Sink());
  ASSERT_TRUE(p.ok());
  std::string line;
  while (line.size() < 200 * 1024) line += std::to_string(line.size()) + ",";
  ASSERT_TRUE(runner.SendLine(p->id, line).ok());
  const std::vector<ProcessEvent> seen = UntilExit();
  ASSERT_FALSE(seen.empty());
  EXPECT_TRUE(seen.back().exit.ok());
  EXPECT_TRUE(testing::ReadFileOrEmpty(got) == line + "\n") << "the line arrived cut or changed";
}

TEST_F(LocalProcessRunnerTest, ALineNobodyReadsTimesOutAndClosesTheInput) {
  LocalProcessRunnerOptions options;
  options.send_timeout_s = 0.3;
  LocalProcessRunner runner(&fs_, options);
  Result<StartedProcess> p = runner.Start(Shell("exec sleep 30"), Sink());
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(runner.SendLine(p->id, "fits the pipe").ok());
  const auto start = std::chrono::steady_clock::now();
  const Status big = runner.SendLine(p->id, std::string(200 * 1024, 'x'));
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(big.code(), Status::Code::kUnavailable);
  EXPECT_NE(big.message().find("did not read"), std::string::npos) << big.message();
  EXPECT_GE(waited, std::chrono::milliseconds(250));
  EXPECT_LT(waited, std::chrono::seconds(3));
  // Part of the line is in the pipe: nothing may follow it but EOF.
  const Status after = runner.SendLine(p->id, "next");
  EXPECT_EQ(after.code(), Status::Code::kUnavailable);
  EXPECT_NE(after.message().find("input is closed"), std::string::npos) << after.message();
  ASSERT_TRUE(runner.Signal(p->id, SIGKILL).ok());
  ASSERT_FALSE(UntilExit().empty());
}

TEST_F(LocalProcessRunnerTest, RefusesBadLinesAndSendsNothingOfThem) {
  LocalProcessRunner runner(&fs_);
  Result<StartedProcess> p = runner.Start(Shell(testing::EchoLinesScript(1)), Sink());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(runner.SendLine(p->id, "two\nlines").code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(runner.SendLine(p->id, std::string(kMaxSentLine + 1, 'x')).code(),
            Status::Code::kInvalidArgument);
  ASSERT_TRUE(runner.SendLine(p->id, "good").ok());
  const std::vector<ProcessEvent> seen = UntilExit();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].message, R"({"got":"good"})");
}

// Lines longer than PIPE_BUF, whose writes the kernel may split, from several threads at once.
TEST_F(LocalProcessRunnerTest, LinesFromSeveralThreadsNeverInterleave) {
  LocalProcessRunner runner(&fs_);
  const std::string got = dir_.Path("got.txt");
  constexpr int kThreads = 4;
  constexpr int kLinesEach = 10;
  Result<StartedProcess> p = runner.Start(
      Shell("head -n " + std::to_string(kThreads * kLinesEach) + " > '" + got + "'"), Sink());
  ASSERT_TRUE(p.ok());
  std::vector<std::thread> senders;
  for (int t = 0; t < kThreads; ++t) {
    senders.emplace_back([&runner, id = p->id, t] {
      for (int i = 0; i < kLinesEach; ++i) {
        EXPECT_TRUE(runner.SendLine(id, std::string(20000, static_cast<char>('a' + t))).ok());
      }
    });
  }
  for (std::thread& sender : senders) sender.join();
  ASSERT_FALSE(UntilExit().empty());
  const std::string text = testing::ReadFileOrEmpty(got);
  int lines = 0;
  for (std::string_view rest = text; !rest.empty(); ++lines) {
    const size_t end = rest.find('\n');
    ASSERT_NE(end, std::string_view::npos);
    const std::string_view line = rest.substr(0, end);
    EXPECT_EQ(line, std::string(20000, line.front())) << "line " << lines << " is mixed";
    rest.remove_prefix(end + 1);
  }
  EXPECT_EQ(lines, kThreads * kLinesEach);
}

TEST_F(LocalProcessRunnerTest, ALogThatCannotBeOpenedFailsTheStart) {
  LocalProcessRunner runner(&fs_);
  ProcessSpec spec = Shell("true");
  spec.log_path = dir_.Path("missing-dir/rank-0.log");
  EXPECT_FALSE(runner.Start(spec, Sink()).ok());
}

}  // namespace
}  // namespace mitra::launcher
