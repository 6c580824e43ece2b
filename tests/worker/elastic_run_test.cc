// Elastic runs of the real GPT example under the real `mitra run`: the machine list edited while
// the job trains (a planned morph), a worker killed, a worker stopped (hung). Every run is
// compared with the same job trained without interruption: each step's loss, and which samples
// each step consumed, must be the same (no step lost, no sample skipped or repeated).
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <thread>

#include "tests/manager/run_helpers.h"
#include "tests/worker/gpt_helpers.h"

namespace mitra {
namespace {

using testing::ExpectNoProcessLeft;
using testing::GptArgs;
using testing::Losses;
using testing::ReadSampleTrace;
using testing::TempDir;

constexpr double kLossTolerance = 2e-5;  // fp32 reordering across shapes, see fidelity_test.cc
constexpr int64_t kSteps = 40;  // ~40 ms each for the tiny model: long enough to act mid-run

// Replaces `path` the way editors do: a new file renamed over the old one.
void RewriteFile(const TempDir& tmp, const std::string& name, const std::string& contents) {
  const std::string staged = tmp.Write(name + ".new", contents);
  ASSERT_EQ(std::rename(staged.c_str(), tmp.Path(name).c_str()), 0);
}

std::vector<std::string> RunArgs(const std::string& machines, const std::string& run_dir,
                                 int stages, const std::vector<std::string>& flags = {}) {
  std::vector<std::string> args{"run",          machines,    "--batch-size", "16",
                                "--nstages",    std::to_string(stages),      "--chunk-size",
                                "4",            "--max-steps", std::to_string(kSteps),
                                "--run-dir",    run_dir};
  args.insert(args.begin() + 1, "--machines");
  args.insert(args.end(), flags.begin(), flags.end());
  args.push_back("--");
  for (const std::string& a : GptArgs()) args.push_back(a);
  return args;
}

struct Reference {
  std::vector<double> losses;  // by step - 1
  std::map<int64_t, std::vector<int64_t>> samples;
};

// The job trained once, 1 x 1, without interruption.
const Reference& Uninterrupted() {
  static const Reference reference = [] {
    TempDir tmp;
    const std::string machines = tmp.Write("machines.txt", "localhost slots=1\n");
    const std::string trace = tmp.Path("trace");
    const testing::MitraResult r = testing::RunProgram(
        MITRA_BINARY, RunArgs(machines, tmp.Path("run"), 1), tmp.path(), 180,
        {{"MITRA_TRACE_SAMPLES", trace}});
    EXPECT_EQ(r.exit_code, 0) << r.output();
    Reference ref;
    ref.losses = Losses(testing::ReadJsonLines(tmp.Path("run") + "/metrics.jsonl"));
    ref.samples = ReadSampleTrace(trace);
    return ref;
  }();
  return reference;
}

// Every step's loss equals the uninterrupted job's; with `consecutive`, metrics.jsonl holds each
// step exactly once, in order (a planned morph re-trains nothing).
void ExpectSameTraining(const std::string& run_dir, const std::string& trace, bool consecutive) {
  const Reference& ref = Uninterrupted();
  ASSERT_EQ(ref.losses.size(), static_cast<size_t>(kSteps));
  const std::vector<JsonObject> metrics = testing::ReadJsonLines(run_dir + "/metrics.jsonl");
  ASSERT_FALSE(metrics.empty());
  if (consecutive) {
    ASSERT_EQ(metrics.size(), static_cast<size_t>(kSteps));
  }
  int64_t expected_step = 1;
  for (const JsonObject& m : metrics) {
    const int64_t step = static_cast<int64_t>(m.GetNumber("step").value_or(0));
    ASSERT_GE(step, 1);
    ASSERT_LE(step, kSteps);
    if (consecutive) {
      EXPECT_EQ(step, expected_step++) << "a step was lost or repeated";
    }
    EXPECT_NEAR(m.GetNumber("loss").value_or(-1), ref.losses[step - 1], kLossTolerance)
        << "step " << step;
  }
  EXPECT_EQ(metrics.back().GetNumber("step"), kSteps);
  EXPECT_EQ(ReadSampleTrace(trace), ref.samples) << "a sample was skipped or repeated";
}

class ElasticGpt : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(Uninterrupted().losses.empty()); }

  std::unique_ptr<testing::MitraProcess> Start(const std::string& list, int stages,
                                               const std::vector<std::string>& flags = {}) {
    machines_ = tmp_.Write("machines.txt", list);
    return testing::MitraProcess::Start(MITRA_BINARY,
                                        RunArgs(machines_, run_dir_, stages, flags), tmp_.path(),
                                        {{"MITRA_TRACE_SAMPLES", trace_}});
  }

  TempDir tmp_;
  std::string machines_;
  const std::string run_dir_ = tmp_.Path("run");
  const std::string trace_ = tmp_.Path("trace");
};

TEST_F(ElasticGpt, ShrinkingTheMachineListMorphsWithoutLosingAStep) {
  auto mitra = Start("localhost slots=4\n", 2);
  ASSERT_TRUE(mitra);
  ASSERT_TRUE(mitra->WaitForStdout("step 2/", 120)) << mitra->Stdout() << mitra->Stderr();
  RewriteFile(tmp_, "machines.txt", "localhost slots=2\n");
  const testing::MitraResult r = mitra->Wait(180);
  ASSERT_EQ(r.exit_code, 0) << r.output();
  EXPECT_NE(r.out.find("mitra: morph done: training again in 2 x 1"), std::string::npos) << r.out;
  EXPECT_EQ(testing::EventsNamed(run_dir_, "launch").size(), 2u);
  EXPECT_TRUE(testing::EventsNamed(run_dir_, "step_lost").empty());
  ExpectSameTraining(run_dir_, trace_, /*consecutive=*/true);
  ExpectNoProcessLeft(run_dir_);
}

TEST_F(ElasticGpt, GrowingTheMachineListMorphsIntoTheLargerShape) {
  auto mitra = Start("localhost slots=2\n", 2);
  ASSERT_TRUE(mitra);
  ASSERT_TRUE(mitra->WaitForStdout("step 2/", 120)) << mitra->Stdout() << mitra->Stderr();
  RewriteFile(tmp_, "machines.txt", "localhost slots=4\n");
  const testing::MitraResult r = mitra->Wait(180);
  ASSERT_EQ(r.exit_code, 0) << r.output();
  EXPECT_NE(r.out.find("mitra: morph done: training again in 2 x 2"), std::string::npos) << r.out;
  ExpectSameTraining(run_dir_, trace_, /*consecutive=*/true);
  ExpectNoProcessLeft(run_dir_);
}

TEST_F(ElasticGpt, AKilledWorkerIsRecoveredFromTheNewestCheckpoint) {
  auto mitra = Start("localhost slots=2\n", 2, {"--checkpoint-every", "1"});
  ASSERT_TRUE(mitra);
  ASSERT_TRUE(mitra->WaitForStdout("step 5/", 120)) << mitra->Stdout() << mitra->Stderr();
  const std::vector<pid_t> pids = testing::LaunchedPids(run_dir_);
  ASSERT_EQ(pids.size(), 2u);
  ASSERT_EQ(::kill(pids[1], SIGKILL), 0);
  const testing::MitraResult r = mitra->Wait(180);
  ASSERT_EQ(r.exit_code, 0) << r.output();
  EXPECT_NE(r.err.find("was killed by signal SIGKILL"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("mitra: recovery done: training again in 2 x 1"), std::string::npos)
      << r.out;
  const std::vector<JsonObject> launches = testing::EventsNamed(run_dir_, "launch");
  ASSERT_EQ(launches.size(), 2u);
  EXPECT_GE(launches[1].GetNumber("resume_step").value_or(0), 2);
  ExpectSameTraining(run_dir_, trace_, /*consecutive=*/false);
  ExpectNoProcessLeft(run_dir_);
}

TEST_F(ElasticGpt, AStoppedWorkerIsFoundByItsMissingHeartbeatsAndRecovered) {
  auto mitra = Start("localhost slots=2\n", 2, {"--checkpoint-every", "1", "--heartbeat-timeout",
                                                 "2"});
  ASSERT_TRUE(mitra);
  ASSERT_TRUE(mitra->WaitForStdout("step 3/", 120)) << mitra->Stdout() << mitra->Stderr();
  const std::vector<pid_t> pids = testing::LaunchedPids(run_dir_);
  ASSERT_EQ(pids.size(), 2u);
  ASSERT_EQ(::kill(pids[0], SIGSTOP), 0);
  const testing::MitraResult r = mitra->Wait(180);
  ASSERT_EQ(r.exit_code, 0) << r.output();
  EXPECT_NE(r.err.find("sent no heartbeat for 2"), std::string::npos) << r.err;
  ExpectSameTraining(run_dir_, trace_, /*consecutive=*/false);
  ExpectNoProcessLeft(run_dir_);
}

TEST_F(ElasticGpt, AManagerKilledAndStartedAgainContinuesTheJob) {
  auto first = Start("localhost slots=2\n", 2, {"--checkpoint-every", "1"});
  ASSERT_TRUE(first);
  ASSERT_TRUE(first->WaitForStdout("step 5/", 120)) << first->Stdout() << first->Stderr();
  first->Signal(SIGKILL);
  first->Wait(30);
  // Its workers die with it (parent-death signal): none may train on beside the next manager.
  // They are reaped by init, which takes a moment.
  for (int i = 0; i < 100; ++i) {
    const std::vector<pid_t> pids = testing::LaunchedPids(run_dir_);
    if (std::all_of(pids.begin(), pids.end(), testing::ProcessGone)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ExpectNoProcessLeft(run_dir_);

  auto second = testing::MitraProcess::Start(MITRA_BINARY, RunArgs(machines_, run_dir_, 2),
                                             tmp_.path(), {{"MITRA_TRACE_SAMPLES", trace_}});
  ASSERT_TRUE(second);
  const testing::MitraResult r = second->Wait(180);
  ASSERT_EQ(r.exit_code, 0) << r.output();
  EXPECT_NE(r.out.find("mitra: resuming from " + run_dir_ + "/checkpoints/step-"),
            std::string::npos)
      << r.out;
  ExpectSameTraining(run_dir_, trace_, /*consecutive=*/false);
  ExpectNoProcessLeft(run_dir_);
}

}  // namespace
}  // namespace mitra
