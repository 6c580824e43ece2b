// SshProcessRunner against real sshd servers on loopback addresses (SshdFixture).
#include "launcher/ssh_process_runner.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <thread>

#include "common/strings.h"
#include "tests/launcher/runner_events.h"
#include "tests/launcher/sshd_fixture.h"
#include "tests/prerequisite.h"
#include "tests/common/run_helpers.h"

namespace mitra::launcher {
namespace {

using testing::SshdFixture;
using testing::TempDir;

constexpr char kHost[] = "127.0.0.2";   // stays up
constexpr char kOther[] = "127.0.0.3";  // stopped and frozen by some tests, started again

class SshProcessRunnerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!SshdFixture::UnavailableReason().empty()) return;
    dir_ = new TempDir();
    Result<std::unique_ptr<SshdFixture>> created =
        SshdFixture::Create(dir_->path(), {kHost, kOther});
    if (created.ok()) {
      sshd_ = std::move(created).value().release();
    } else {
      setup_error_ = new std::string(created.status().ToString());
    }
  }

  static void TearDownTestSuite() {
    delete sshd_;
    delete dir_;
    delete setup_error_;
    sshd_ = nullptr;
    dir_ = nullptr;
    setup_error_ = nullptr;
  }

  void SetUp() override {
    MITRA_SKIP_WITHOUT(SshdFixture::UnavailableReason());
    ASSERT_EQ(setup_error_, nullptr) << *setup_error_;
  }

  static SshProcessRunnerOptions Options(const std::string& address) {
    SshProcessRunnerOptions options;
    options.ssh = sshd_->Options(address);
    return options;
  }

  ProcessSpec Shell(const std::string& script) {
    return testing::ShellSpec(script, local_.Path("out.log"));
  }
  ProcessEventSink Sink() { return events_.Sink(); }
  std::vector<ProcessEvent> UntilExit(double timeout_s = 10) {
    return events_.UntilExit(timeout_s);
  }
  bool WaitForMessage(const std::string& text) { return events_.WaitForMessage(text); }

  static inline TempDir* dir_ = nullptr;
  static inline SshdFixture* sshd_ = nullptr;
  static inline std::string* setup_error_ = nullptr;
  TempDir local_;
  PosixFileSystem fs_;
  testing::RunnerEvents events_;
};

std::string CommandLineOf(int pid) {
  std::string text = testing::ReadFileOrEmpty("/proc/" + std::to_string(pid) + "/cmdline");
  for (char& c : text) {
    if (c == '\0') c = ' ';
  }
  return text;
}

TEST_F(SshProcessRunnerTest, RunsAProcessAndReportsItsMessagesOutputAndExitCode) {
  SshProcessRunner runner(Options(kHost), &fs_);
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
  EXPECT_EQ(seen[1].id, p->id);
  EXPECT_EQ(seen[1].exit.ToString(), "exited with code 3");
  EXPECT_EQ(seen[1].last_lines,
            (std::vector<std::string>{"hello", R"(@mitra {"event":"ready"})", "oops"}));
  EXPECT_EQ(testing::ReadFileOrEmpty(local_.Path("out.log")),
            "hello\n@mitra {\"event\":\"ready\"}\noops\n");
}

TEST_F(SshProcessRunnerTest, GivesExactlyTheEnvironment) {
  SshProcessRunner runner(Options(kHost), &fs_);
  const std::string marker = local_.Path("executed");
  ProcessSpec spec;
  spec.program = "/usr/bin/env";
  spec.environment = {{"PATH", "/usr/bin:/bin"},
                      {"TRICKY", "it's \"$(touch " + marker + ")\" `touch " + marker + "`; x"},
                      {"EMPTY", ""},
                      {"SPACES", "  a  b  "}};
  spec.log_path = local_.Path("env.log");
  ASSERT_TRUE(runner.Start(spec, Sink()).ok());
  const std::vector<ProcessEvent> seen = UntilExit();
  ASSERT_FALSE(seen.empty());
  EXPECT_TRUE(seen.back().exit.ok()) << seen.back().exit.ToString();
  EXPECT_EQ(testing::ReadFileOrEmpty(spec.log_path),
            "EMPTY=\nPATH=/usr/bin:/bin\nSPACES=  a  b  \nTRICKY=it's \"$(touch " + marker +
                ")\" `touch " + marker + "`; x\n");
  EXPECT_FALSE(std::ifstream(marker).good()) << "a command substitution was executed";
}

TEST_F(SshProcessRunnerTest, PassesArgumentsAndWorkingDirectoryExactly) {
  SshProcessRunner runner(Options(kHost), &fs_);
  const std::string cwd = local_.Path("it's a dir; $(x)");
  ASSERT_EQ(::mkdir(cwd.c_str(), 0755), 0);
  ProcessSpec spec = Shell("pwd; for a in \"$@\"; do printf '[%s]\\n' \"$a\"; done");
  spec.args.push_back("argv0");
  spec.args.insert(spec.args.end(), {"", "a b", "'", "$(id)", "x;y", "line1\nline2"});
  spec.working_directory = cwd;
  ASSERT_TRUE(runner.Start(spec, Sink()).ok());
  const std::vector<ProcessEvent> seen = UntilExit();
  ASSERT_FALSE(seen.empty());
  EXPECT_TRUE(seen.back().exit.ok()) << seen.back().exit.ToString();
  EXPECT_EQ(testing::ReadFileOrEmpty(spec.log_path),
            cwd + "\n[]\n[a b]\n[']\n[$(id)]\n[x;y]\n[line1\nline2]\n");
}

TEST_F(SshProcessRunnerTest, ReportsTheRemotePidAndSignalsExactlyThatProcess) {
  SshProcessRunner runner(Options(kHost), &fs_);
  Result<StartedProcess> p = runner.Start(Shell("echo '@mitra up'; exec sleep 30"), Sink());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_TRUE(WaitForMessage("up"));
  // Same machine: the pid is visible here, and it is the program (the shell exec'd it).
  for (int i = 0; i < 200 && !StartsWith(CommandLineOf(p->pid), "sleep"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(CommandLineOf(p->pid), "sleep 30 ");
  ASSERT_TRUE(runner.Signal(p->id, SIGTERM).ok());
  const std::vector<ProcessEvent> seen = UntilExit();
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back().exit.signal, SIGTERM);
  EXPECT_EQ(seen.back().exit.ToString(), "was killed by signal SIGTERM");
  EXPECT_TRUE(testing::ProcessGone(p->pid));
  EXPECT_TRUE(runner.Signal(p->id, SIGKILL).ok());  // after the exit: a no-op
}

TEST_F(SshProcessRunnerTest, SigkillIsReported) {
  SshProcessRunner runner(Options(kHost), &fs_);
  Result<StartedProcess> p = runner.Start(Shell("echo '@mitra up'; exec sleep 30"), Sink());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_TRUE(WaitForMessage("up"));
  ASSERT_TRUE(runner.Signal(p->id, SIGKILL).ok());
  const std::vector<ProcessEvent> seen = UntilExit();
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back().exit.signal, SIGKILL);
  EXPECT_FALSE(seen.back().exit.ok());
}

TEST_F(SshProcessRunnerTest, StartsProcessesFromSeveralThreadsAtOnce) {
  SshProcessRunner runner(Options(kHost), &fs_);
  std::vector<std::thread> threads;
  std::vector<Status> statuses(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      Result<StartedProcess> p = runner.Start(Shell("exit " + std::to_string(10 + t)), Sink());
      statuses[t] = p.status();
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const Status& status : statuses) EXPECT_TRUE(status.ok()) << status.ToString();
  std::set<int> codes;
  for (int i = 0; i < 4; ++i) {
    const std::vector<ProcessEvent> seen = UntilExit();
    ASSERT_FALSE(seen.empty());
    codes.insert(seen.back().exit.exit_code);
  }
  EXPECT_EQ(codes, (std::set<int>{10, 11, 12, 13}));
}

TEST_F(SshProcessRunnerTest, DestructionLeavesRemoteProcessesRunningAndReportsNothing) {
  int pid = 0;
  {
    SshProcessRunner runner(Options(kHost), &fs_);
    Result<StartedProcess> p = runner.Start(Shell("exec sleep 30"), Sink());
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    pid = p->pid;
  }
  EXPECT_TRUE(events_.QuietFor(0.3));
  EXPECT_FALSE(testing::ProcessGone(pid));
  ::kill(pid, SIGKILL);  // same machine: clean up by hand
}

TEST_F(SshProcessRunnerTest, AStartThatFailsOnTheHostReturnsItsError) {
  SshProcessRunner runner(Options(kHost), &fs_);
  ProcessSpec spec = Shell("echo never");
  spec.working_directory = local_.Path("missing");
  Result<StartedProcess> p = runner.Start(spec, Sink());
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), Status::Code::kUnavailable);
  EXPECT_NE(p.status().message().find("missing"), std::string::npos) << p.status().ToString();
  EXPECT_NE(p.status().message().find(kHost), std::string::npos) << p.status().ToString();
  EXPECT_TRUE(events_.QuietFor(0.2));
}

TEST_F(SshProcessRunnerTest, RefusesASpecThatCannotBeQuotedSafely) {
  SshProcessRunner runner(Options(kHost), &fs_);
  ProcessSpec spec = Shell("true");
  spec.environment["BAD NAME"] = "x";
  EXPECT_EQ(runner.Start(spec, Sink()).status().code(), Status::Code::kInvalidArgument);
}

TEST_F(SshProcessRunnerTest, StreamsLargeOutputCompletely) {
  SshProcessRunner runner(Options(kHost), &fs_);
  ASSERT_TRUE(runner.Start(Shell("head -c 4000000 /dev/zero | tr '\\0' x; echo"), Sink()).ok());
  const std::vector<ProcessEvent> seen = UntilExit(20);
  ASSERT_FALSE(seen.empty());
  EXPECT_TRUE(seen.back().exit.ok());
  struct stat st {};
  ASSERT_EQ(::stat(local_.Path("out.log").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 4000001);
}

// Through sshd, the remote login shell and its `exec`: the process's stdin is the channel's.
TEST_F(SshProcessRunnerTest, SendsLinesToTheRemoteProcessInOrder) {
  SshProcessRunner runner(Options(kHost), &fs_);
  EXPECT_TRUE(runner.CanSendLines());
  Result<StartedProcess> p = runner.Start(Shell(testing::EchoLinesScript(2)), Sink());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_TRUE(runner.SendLine(p->id, "one").ok());
  ASSERT_TRUE(WaitForMessage(R"({"got":"one"})"));
  ASSERT_TRUE(runner.SendLine(p->id, "two").ok());
  const std::vector<ProcessEvent> seen = UntilExit();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].message, R"({"got":"two"})");
  EXPECT_TRUE(seen[1].exit.ok()) << seen[1].exit.ToString();

  const Status late = runner.SendLine(p->id, "late");
  EXPECT_EQ(late.code(), Status::Code::kUnavailable);
  EXPECT_NE(late.message().find("exited"), std::string::npos) << late.message();
  EXPECT_EQ(runner.SendLine(p->id, "a\nb").code(), Status::Code::kInvalidArgument);
}

// Every command line on this machine (the sshd fixture's hosts are its loopback addresses).
std::string AllCommandLines() {
  std::string all;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") == std::string::npos) {
      all += CommandLineOf(std::stoi(name)) + "\n";
    }
  }
  return all;
}

TEST_F(SshProcessRunnerTest, ASecretReachesTheProgramsEnvironmentButNoCommandLine) {
  SshProcessRunner runner(Options(kHost), &fs_);
  const std::string secret = "0123456789abcdef0123456789abcdef-secret";
  ProcessSpec spec = Shell("echo \"token=$T\"; read -r line; echo \"then=$line\"");
  spec.environment["T"] = secret;
  spec.secrets = {"T"};
  Result<StartedProcess> p = runner.Start(spec, Sink());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  for (int i = 0; i < 200 && testing::ReadFileOrEmpty(spec.log_path).empty(); ++i) ::usleep(10000);
  ASSERT_EQ(testing::ReadFileOrEmpty(spec.log_path), "token=" + secret + "\n");
  // While it runs (waiting for its next line), no process shows the secret on its command line.
  EXPECT_EQ(AllCommandLines().find(secret), std::string::npos);
  // The pid reported is the program's: the shell that read the secret exec'd it.
  EXPECT_NE(CommandLineOf(p->pid).find("read -r line"), std::string::npos) << CommandLineOf(p->pid);
  EXPECT_EQ(CommandLineOf(p->pid).find("IFS="), std::string::npos) << CommandLineOf(p->pid);
  // The lines sent later reach the program, after the secret's.
  ASSERT_TRUE(runner.SendLine(p->id, "go").ok());
  const std::vector<ProcessEvent> seen = UntilExit();
  ASSERT_FALSE(seen.empty());
  EXPECT_TRUE(seen.back().exit.ok()) << seen.back().exit.ToString();
  EXPECT_EQ(testing::ReadFileOrEmpty(spec.log_path), "token=" + secret + "\nthen=go\n");
}

// Three lines of kMaxSentLine are more than sshd's channel window and the pipe behind it hold:
// the last goes out only as the process, which starts reading late, takes the first.
TEST_F(SshProcessRunnerTest, LinesBeyondTheChannelWindowArriveWholeAsTheProcessReads) {
  SshProcessRunner runner(Options(kHost), &fs_);
  const std::string got = local_.Path("got.txt");
  Result<StartedProcess> p = runner.Start(Shell("sleep 1; head -n 3 > '" + got + "'"), Sink());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  std::string expected;
  for (char c : {'a', 'b', 'c'}) {
    const std::string line(kMaxSentLine, c);
    const Status sent = runner.SendLine(p->id, line);
    ASSERT_TRUE(sent.ok()) << sent.ToString();
    expected += line + "\n";
  }
  const std::vector<ProcessEvent> seen = UntilExit(20);
  ASSERT_FALSE(seen.empty());
  EXPECT_TRUE(seen.back().exit.ok()) << seen.back().exit.ToString();
  EXPECT_TRUE(testing::ReadFileOrEmpty(got) == expected) << "the lines arrived cut or changed";
}

TEST_F(SshProcessRunnerTest, ALineNobodyReadsTimesOutAndClosesTheInput) {
  SshProcessRunnerOptions options = Options(kHost);
  options.send_timeout_s = 0.5;
  SshProcessRunner runner(options, &fs_);
  Result<StartedProcess> p = runner.Start(Shell("exec sleep 30"), Sink());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  Status sent;
  int lines = 0;
  while (sent.ok() && lines < 8) {
    sent = runner.SendLine(p->id, std::string(kMaxSentLine, 'x'));
    ++lines;
  }
  EXPECT_EQ(sent.code(), Status::Code::kUnavailable);
  EXPECT_NE(sent.message().find("did not read"), std::string::npos) << sent.message();
  // Part of that line went out: sshd's window and the pipe behind it hold whole multiples of
  // 64 KiB, which never end where a line of kMaxSentLine + 1 bytes does.
  EXPECT_NE(sent.message().find("went out"), std::string::npos) << sent.message();
  const Status after = runner.SendLine(p->id, "next");
  EXPECT_EQ(after.code(), Status::Code::kUnavailable);
  EXPECT_NE(after.message().find("input is closed"), std::string::npos) << after.message();
  ASSERT_TRUE(runner.Signal(p->id, SIGKILL).ok());
  ASSERT_FALSE(UntilExit().empty());
}

TEST_F(SshProcessRunnerTest, RunCommandReturnsExitCodeAndBothStreams) {
  SshProcessRunner runner(Options(kHost), &fs_);
  ASSERT_TRUE(runner.Connect().ok());
  Result<CommandResult> r = runner.RunCommand({"sh", "-c", "echo out; echo err >&2; exit 4"}, 5);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 4);
  EXPECT_EQ(r->out, "out\n");
  EXPECT_EQ(r->err, "err\n");
  Result<CommandResult> quoted = runner.RunCommand({"printf", "%s|", "a b", "it's", "$(id)"}, 5);
  ASSERT_TRUE(quoted.ok());
  EXPECT_EQ(quoted->out, "a b|it's|$(id)|");
  Result<CommandResult> health = runner.RunCommand({"true"}, 5);
  ASSERT_TRUE(health.ok());
  EXPECT_TRUE(health->ok());
}

TEST_F(SshProcessRunnerTest, RunCommandTimesOut) {
  SshProcessRunner runner(Options(kHost), &fs_);
  const auto start = std::chrono::steady_clock::now();
  Result<CommandResult> r = runner.RunCommand({"sleep", "10"}, 0.3);
  EXPECT_EQ(r.status().code(), Status::Code::kTimeout) << r.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
}

TEST_F(SshProcessRunnerTest, ResolvesProgramsOnTheHost) {
  SshProcessRunner runner(Options(kHost), &fs_);
  Result<std::string> sh = runner.ResolveProgram("/bin/sh", "");
  ASSERT_TRUE(sh.ok()) << sh.status().ToString();
  EXPECT_EQ(*sh, "/bin/sh");
  Result<std::string> bare = runner.ResolveProgram("sleep", "/nonexistent:/usr/bin:/bin");
  ASSERT_TRUE(bare.ok()) << bare.status().ToString();
  EXPECT_TRUE(*bare == "/usr/bin/sleep" || *bare == "/bin/sleep") << *bare;

  const std::string plain = local_.Write("not-executable", "data");
  for (const auto& [program, expected] : std::vector<std::pair<std::string, std::string>>{
           {local_.Path("missing"), "does not exist"},
           {"no-such-program-anywhere", "was not found"},
           {local_.path(), "is a directory"},
           {plain, "chmod +x"}}) {
    Result<std::string> r = runner.ResolveProgram(program, "/usr/bin");
    ASSERT_FALSE(r.ok()) << program;
    EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument) << r.status().ToString();
    EXPECT_NE(r.status().message().find(expected), std::string::npos) << r.status().ToString();
    EXPECT_NE(r.status().message().find(kHost), std::string::npos) << r.status().ToString();
  }
}

TEST_F(SshProcessRunnerTest, RefusesAnUnknownHostKeyAndSaysHowToAcceptIt) {
  SshProcessRunnerOptions options = Options(kHost);
  options.ssh.known_hosts_file =
      local_.Write("known_hosts", sshd_->known_hosts_line(kOther) + "\n");
  SshProcessRunner runner(options, &fs_);
  const Status status = runner.Connect();
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument) << status.ToString();
  const std::string accept = "ssh-keyscan -p " + std::to_string(sshd_->port(kHost)) + " " + kHost +
                             " >> " + options.ssh.known_hosts_file;
  EXPECT_NE(status.message().find(accept), std::string::npos) << status.ToString();
  EXPECT_FALSE(runner.Start(Shell("true"), Sink()).ok());
}

TEST_F(SshProcessRunnerTest, RefusesAChangedHostKey) {
  // The host's name with another host's key: what a reinstalled host (or an attacker) shows.
  const std::string other_key =
      sshd_->known_hosts_line(kOther).substr(sshd_->known_hosts_line(kOther).find(' '));
  SshProcessRunnerOptions options = Options(kHost);
  options.ssh.known_hosts_file =
      local_.Write("known_hosts", "[" + std::string(kHost) +
                                      "]:" + std::to_string(sshd_->port(kHost)) + other_key + "\n");
  SshProcessRunner runner(options, &fs_);
  const Status status = runner.Connect();
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument) << status.ToString();
  EXPECT_NE(status.message().find("has changed"), std::string::npos) << status.ToString();
  EXPECT_NE(status.message().find("ssh-keygen -R"), std::string::npos) << status.ToString();
}

TEST_F(SshProcessRunnerTest, RefusesAKeyTheHostDoesNotAccept) {
  const std::string stranger = local_.Path("stranger");
  ASSERT_TRUE(testing::GenerateSshKey(stranger).ok());
  SshProcessRunnerOptions options = Options(kHost);
  options.ssh.identity_files = {stranger};
  SshProcessRunner runner(options, &fs_);
  const Status status = runner.Connect();
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument) << status.ToString();
  EXPECT_NE(status.message().find(stranger + " was refused"), std::string::npos)
      << status.ToString();
  EXPECT_NE(status.message().find("authorized_keys"), std::string::npos) << status.ToString();
}

TEST_F(SshProcessRunnerTest, AHostWithoutSshdIsUnavailable) {
  SshProcessRunnerOptions options = Options(kHost);
  options.ssh.host = "127.0.0.9";
  SshProcessRunner runner(options, &fs_);
  const Status status = runner.Connect();
  EXPECT_EQ(status.code(), Status::Code::kUnavailable);
  EXPECT_NE(status.message().find("check that the host is up and that sshd listens on port"),
            std::string::npos)
      << status.ToString();
}

TEST_F(SshProcessRunnerTest, AHostNameThatDoesNotResolveIsCalledMisspelt) {
  SshProcessRunnerOptions options = Options(kHost);
  options.ssh.host = "no-such-host.invalid";  // RFC 2606: never resolves
  SshProcessRunner runner(options, &fs_);
  const Status status = runner.Connect();
  EXPECT_EQ(status.code(), Status::Code::kUnavailable);
  EXPECT_NE(status.message().find("no address has that name: check its spelling in the "
                                  "machine list"),
            std::string::npos)
      << status.ToString();
}

TEST_F(SshProcessRunnerTest, AStoppedHostLosesItsProcessesQuicklyAndReconnectsLater) {
  SshProcessRunner runner(Options(kOther), &fs_);
  std::vector<ProcessId> ids;
  for (int i = 0; i < 2; ++i) {
    Result<StartedProcess> p = runner.Start(Shell("echo '@mitra up'; exec sleep 30"), Sink());
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    ASSERT_TRUE(WaitForMessage("up"));
    ids.push_back(p->id);
  }
  const auto stop = std::chrono::steady_clock::now();
  ASSERT_TRUE(sshd_->Stop(kOther).ok());
  for (int i = 0; i < 2; ++i) {
    const std::vector<ProcessEvent> seen = UntilExit(5);
    ASSERT_FALSE(seen.empty());
    EXPECT_TRUE(seen.back().exit.lost);
    EXPECT_FALSE(seen.back().exit.ok());
    EXPECT_EQ(seen.back().exit.ToString(), "was lost with the connection to its machine");
  }
  EXPECT_LT(std::chrono::steady_clock::now() - stop, std::chrono::seconds(3));
  EXPECT_FALSE(runner.RunCommand({"true"}, 5).ok());
  ASSERT_TRUE(sshd_->Start(kOther).ok());
  Result<CommandResult> again = runner.RunCommand({"true"}, 5);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(again->ok());
}

TEST_F(SshProcessRunnerTest, AFrozenHostIsLostByKeepalives) {
  SshProcessRunner runner(Options(kOther), &fs_);
  Result<StartedProcess> p = runner.Start(Shell("echo '@mitra up'; exec sleep 30"), Sink());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_TRUE(WaitForMessage("up"));
  const auto freeze = std::chrono::steady_clock::now();
  ASSERT_TRUE(sshd_->Freeze(kOther).ok());
  const std::vector<ProcessEvent> seen = UntilExit(8);
  const auto waited = std::chrono::steady_clock::now() - freeze;
  ASSERT_TRUE(sshd_->Stop(kOther).ok());
  ASSERT_TRUE(sshd_->Start(kOther).ok());
  ASSERT_FALSE(seen.empty());
  EXPECT_TRUE(seen.back().exit.lost);
  EXPECT_LT(waited, std::chrono::seconds(5));  // ~3 s of keepalives, plus a loaded machine
}

TEST_F(SshProcessRunnerTest, AHostCutOffByTheNetworkIsLostByKeepalives) {
  MITRA_SKIP_WITHOUT(SshdFixture::PartitionUnavailableReason());
  SshProcessRunner runner(Options(kOther), &fs_);
  Result<StartedProcess> p = runner.Start(Shell("echo '@mitra up'; exec sleep 30"), Sink());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_TRUE(WaitForMessage("up"));
  const auto cut = std::chrono::steady_clock::now();
  ASSERT_TRUE(sshd_->CutOff(kOther).ok());
  const std::vector<ProcessEvent> seen = UntilExit(8);
  const double waited_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - cut).count();
  ASSERT_TRUE(sshd_->Reconnect(kOther).ok());
  ASSERT_TRUE(sshd_->Stop(kOther).ok());  // the stranded `sleep` goes with it
  ASSERT_TRUE(sshd_->Start(kOther).ok());
  ASSERT_FALSE(seen.empty());
  EXPECT_TRUE(seen.back().exit.lost);
  std::cout << "cut off -> lost: " << waited_s << " s\n";
  EXPECT_LT(waited_s, 5);  // ~3 s of keepalives, plus a loaded machine
}

}  // namespace
}  // namespace mitra::launcher
