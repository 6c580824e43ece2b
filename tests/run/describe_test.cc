#include "run/describe.h"

#include <gtest/gtest.h>
#include <signal.h>

#include "tests/launcher/scripted_process_runner.h"

namespace mitra::run {
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
  EXPECT_FALSE(d->micro_batch_independent);
  EXPECT_FALSE(d->buffers_known);
}

TEST_F(DescribeTest, ReadsBuffersAndTheMicroBatchDeclaration) {
  runner_.on_start = [](ScriptedProcessRunner& r, int) {
    r.Message(0, R"({"event":"describe","segments":2,"micro_batch_independent":true,)"
                 R"("parameters":"a.w[2,3] b.w[3]","buffers":"a.bn.running_mean[3]"})");
    r.Exit(0, 0);
  };
  Result<ProgramDescription> d = Describe();
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_TRUE(d->micro_batch_independent);
  ASSERT_TRUE(d->buffers_known);
  ASSERT_EQ(d->buffers.size(), 1u);
  EXPECT_EQ(d->buffers[0].first, "a.bn.running_mean");
  EXPECT_EQ(d->buffers[0].second, (std::vector<int64_t>{3}));
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
  EXPECT_NE(Error().find("printed a describe record without a valid \"segments\" count (a whole "
                        "number from 1 to 1000000): {\"event\":\"describe\",\"segments\":0}"),
            std::string::npos)
      << Error();

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
}  // namespace mitra::run

namespace mitra::run {
namespace {

checkpoint::Manifest TwoSegmentManifest() {
  checkpoint::Manifest m;
  m.segments = {"a", "b"};
  checkpoint::FileEntry a{"seg-a.pt", 0, 0, {}};
  a.tensors.push_back({"param/w", checkpoint::DType::kFloat32, {2, 3}, 0});
  a.tensors.push_back({"exp_avg/w", checkpoint::DType::kFloat32, {2, 3}, 0});
  a.tensors.push_back({"buffer/bn.running_mean", checkpoint::DType::kFloat32, {3}, 0});
  checkpoint::FileEntry b{"seg-b.pt", 0, 0, {}};
  b.tensors.push_back({"param/w", checkpoint::DType::kFloat32, {3}, 0});
  m.files = {a, b};
  return m;
}

ProgramDescription TwoSegmentProgram(const std::string& buffers) {
  ProgramDescription d;
  d.segments = 2;
  d.parameters = *ParseParameters("a.w[2,3] b.w[3]");
  d.buffers = *ParseParameters(buffers);
  d.buffers_known = true;
  return d;
}

TEST(CheckpointMatch, ComparesBuffersLikeParameters) {
  const checkpoint::Manifest m = TwoSegmentManifest();
  EXPECT_TRUE(CheckCheckpointMatches(TwoSegmentProgram("a.bn.running_mean[3]"), m, "ck").ok());
  Status other_shape = CheckCheckpointMatches(TwoSegmentProgram("a.bn.running_mean[4]"), m, "ck");
  EXPECT_NE(other_shape.message().find("buffer 'a.bn.running_mean' is [3] in it but [4] in the program"),
            std::string::npos)
      << other_shape.message();
  Status missing = CheckCheckpointMatches(TwoSegmentProgram(""), m, "ck");
  EXPECT_NE(missing.message().find("it has buffer 'a.bn.running_mean' [3], which the program "
                                   "does not have"),
            std::string::npos)
      << missing.message();
  Status extra = CheckCheckpointMatches(
      TwoSegmentProgram("a.bn.running_mean[3] b.bn.running_var[3]"), m, "ck");
  EXPECT_NE(extra.message().find("the program's buffer 'b.bn.running_var' is not in it"),
            std::string::npos)
      << extra.message();
  // A program that does not list its buffers is compared on parameters only.
  ProgramDescription silent = TwoSegmentProgram("");
  silent.buffers_known = false;
  EXPECT_TRUE(CheckCheckpointMatches(silent, m, "ck").ok());
}

TEST(SegmentStateElements, AddsEachSegmentsParametersAndBuffers) {
  EXPECT_EQ(SegmentStateElements(TwoSegmentProgram("a.bn.running_mean[3] b.bn.n[]")),
            (std::vector<int64_t>{9, 4}));
  // A buffer of a segment with no parameters, a segment count the names do not make, or no
  // names at all: nothing to weigh by.
  EXPECT_TRUE(SegmentStateElements(TwoSegmentProgram("c.bn.running_mean[3]")).empty());
  ProgramDescription three = TwoSegmentProgram("");
  three.segments = 3;
  EXPECT_TRUE(SegmentStateElements(three).empty());
  ProgramDescription silent;
  silent.segments = 2;
  EXPECT_TRUE(SegmentStateElements(silent).empty());
}

}  // namespace
}  // namespace mitra::run
