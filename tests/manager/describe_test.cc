#include "manager/describe.h"

#include <gtest/gtest.h>
#include <signal.h>

#include "tests/launcher/scripted_process_runner.h"

namespace mitra::manager {
namespace {

using testing::ScriptedProcessRunner;

class DescribeTest : public ::testing::Test {
 protected:
  Result<ProgramDescription> Describe(double timeout_s = 10) {
    launcher::ProcessSpec spec;
    spec.program = "/bin/train";
    return DescribeProgram(runner_, spec, clock_, timeout_s);
  }

  std::string Error(double timeout_s = 10) {
    Result<ProgramDescription> d = Describe(timeout_s);
    EXPECT_FALSE(d.ok());
    return d.ok() ? "" : d.status().message();
  }

  ScriptedProcessRunner runner_;
  ManualClock clock_;
};

TEST_F(DescribeTest, ReadsTheDescribeRecord) {
  runner_.on_start = [](ScriptedProcessRunner& r, int) {
    r.Message(0, R"({"event":"log"})");
    r.Message(0, R"({"event":"describe","segments":6,"tokens_per_sample":512})");
    r.Exit(0, 0);
  };
  Result<ProgramDescription> d = Describe();
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->segments, 6);
  EXPECT_EQ(d->tokens_per_sample, 512);
}

TEST_F(DescribeTest, AFailingProgramIsQuoted) {
  runner_.on_start = [](ScriptedProcessRunner& r, int) {
    r.Exit(0, 3, 0, {"Traceback:", "no such dataset"});
  };
  const std::string message = Error();
  EXPECT_NE(message.find("'/bin/train' with MITRA_DESCRIBE=1 exited with code 3"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("Its last output:\n  | Traceback:\n  | no such dataset"),
            std::string::npos)
      << message;
}

TEST_F(DescribeTest, NoRecordOrABadOneIsAnError) {
  runner_.on_start = [](ScriptedProcessRunner& r, int index) { r.Exit(index, 0); };
  EXPECT_NE(Error().find("printed no `@mitra {\"event\":\"describe\",...}` line"),
            std::string::npos);
  EXPECT_NE(Error().find("It printed nothing."), std::string::npos);

  runner_.on_start = [](ScriptedProcessRunner& r, int index) {
    r.Message(index, R"({"event":"describe","segments":0})");
    r.Exit(index, 0);
  };
  EXPECT_NE(Error().find("without a valid \"segments\" count"), std::string::npos);

  runner_.on_start = [](ScriptedProcessRunner& r, int index) {
    r.Message(index, R"({"event":"describe",)");
    r.Exit(index, 0);
  };
  EXPECT_NE(Error().find("a malformed @mitra line"), std::string::npos);
}

TEST_F(DescribeTest, AProgramThatDoesNotExitIsKilled) {
  runner_.on_signal = [](ScriptedProcessRunner& r, int index, int s) {
    if (s == SIGKILL) r.Exit(index, 0, SIGKILL, {"training forever"});
  };
  const std::string message = Error(/*timeout_s=*/0);
  EXPECT_NE(message.find("did not exit within 0 s"), std::string::npos) << message;
  EXPECT_NE(message.find("  | training forever"), std::string::npos) << message;
  EXPECT_EQ(runner_.SignalCount(SIGKILL), 1);
}

TEST_F(DescribeTest, AStartFailureIsReported) {
  runner_.fail_start_at = 0;
  EXPECT_NE(Error().find("cannot run '/bin/train' to ask for its shape"), std::string::npos);
}

}  // namespace
}  // namespace mitra::manager
