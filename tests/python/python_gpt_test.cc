// The Python GPT (examples/python/gpt_train.py) on mitra's C++ runtime: the same training as
// the C++ program from the same seed, the same in every shape with dropout on, and elastic
// under the real `mitra run` (a morph that keeps the Python workers, a killed worker) with
// every step and every sample once. Its Python is Debian's /usr/bin/python3; the package is
// the build's (PYTHONPATH, set by tests/CMakeLists.txt).
#include <gtest/gtest.h>
#include <signal.h>

#include <cctype>
#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/common/run_helpers.h"
#include "tests/worker/elastic_job.h"
#include "tests/worker/gpt_helpers.h"
#include "tests/worker/job_runner.h"
#include "tests/python/python_job.h"

namespace mitra {
namespace {

using testing::RewriteFile;
using testing::TempDir;

using testing::kPython;
// The fidelity tests' tolerance (tests/worker/fidelity_test.cc derives it): fp32 sums in
// another order, which another shape brings.
constexpr double kLossTolerance = 2e-5;

std::vector<std::string> GptArgs(const std::vector<std::string>& extra) {
  std::vector<std::string> args{"--model", "tiny", "--seed", "11", "--lr", "1e-3",
                                "--batch-size", "16", "--chunk-size", "4"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

std::vector<std::string> PythonGpt(const std::vector<std::string>& extra) {
  std::vector<std::string> args{MITRA_PYTHON_GPT_TRAIN};
  for (const std::string& a : GptArgs(extra)) args.push_back(a);
  return args;
}

// Each step's loss of `got` within the tolerance of `want`'s.
void ExpectSameLosses(const testing::JobResult& got, const testing::JobResult& want,
                      const std::string& what) {
  ASSERT_EQ(got.losses.size(), want.losses.size()) << what;
  for (size_t i = 0; i < want.losses.size(); ++i) {
    EXPECT_NEAR(got.losses[i], want.losses[i], kLossTolerance) << what << ", step " << i + 1;
  }
}

// The C++ and the Python program build the same layers in the same order from the same
// generator, run the same LibTorch operators on the same samples and draw the same dropout
// masks: their losses are not merely close but equal, bit for bit.
TEST(PythonGpt, TrainsExactlyLikeTheCppProgramFromTheSameSeed) {
  for (const auto& [stages, schedule] :
       std::vector<std::pair<int, std::string>>{{1, "1f1b"}, {2, "1f1b"}, {2, "zb-h1"}}) {
    const int replicas = 1;
    const std::vector<std::string> extra{"--steps", "6", "--dropout", "0.1", "--schedule",
                                         schedule};
    const testing::JobResult cpp = testing::RunJob(MITRA_GPT_TRAIN, stages, replicas, GptArgs(extra));
    const testing::JobResult py = testing::RunJob(kPython, stages, replicas, PythonGpt(extra));
    ASSERT_TRUE(cpp.ok()) << cpp.rank_output[0];
    ASSERT_TRUE(py.ok()) << py.rank_output[0] << (py.rank_output.size() > 1 ? py.rank_output[1] : "");
    ASSERT_EQ(cpp.losses.size(), 6u);
    EXPECT_EQ(py.losses, cpp.losses) << stages << " x " << replicas << " " << schedule;
  }
}

TEST(PythonGpt, TrainsTheSameIn1x1_2x2And3x1WithDropout) {
  const std::vector<std::string> extra{"--steps", "5", "--dropout", "0.1"};
  const testing::JobResult one = testing::RunJob(kPython, 1, 1, PythonGpt(extra));
  ASSERT_TRUE(one.ok()) << one.rank_output[0];
  ASSERT_EQ(one.losses.size(), 5u);
  for (const auto& [stages, replicas] : std::vector<std::pair<int, int>>{{2, 2}, {3, 1}}) {
    const testing::JobResult r = testing::RunJob(kPython, stages, replicas, PythonGpt(extra));
    ASSERT_TRUE(r.ok()) << r.rank_output[0];
    ExpectSameLosses(r, one, std::to_string(stages) + " x " + std::to_string(replicas));
  }
}

// Every schedule runs Python segments, recomputation calling a segment's forward twice (its
// dropout masks repeated, its buffers left as the first forward left them).
TEST(PythonGpt, TrainsTheSameUnderEverySchedule) {
  const std::vector<std::string> steps{"--steps", "4", "--dropout", "0.1"};
  const testing::JobResult one = testing::RunJob(kPython, 1, 1, PythonGpt(steps));
  ASSERT_TRUE(one.ok()) << one.rank_output[0];
  for (const std::vector<std::string>& schedule :
       std::vector<std::vector<std::string>>{{"--schedule", "gpipe"},
                                             {"--schedule", "varuna"},
                                             {"--schedule", "1f1b", "--recompute"},
                                             {"--schedule", "zb-h1"},
                                             {"--schedule", "interleaved"},
                                             {"--schedule", "zb-v"}}) {
    std::vector<std::string> extra = steps;
    extra.insert(extra.end(), schedule.begin(), schedule.end());
    const testing::JobResult r = testing::RunJob(kPython, 2, 1, PythonGpt(extra));
    ASSERT_TRUE(r.ok()) << r.rank_output[0] << r.rank_output[1];
    ExpectSameLosses(r, one, schedule[1] + (schedule.size() > 2 ? " " + schedule[2] : ""));
  }
}

// mitra.Linear leaves its weight gradients to zb-h1's W in Python segments as cutpoint::Linear
// does in C++: in the traced step each W of the bench GPT's stages takes milliseconds (the
// blocks' weight gradients; 15.9 ms in C++, docs/performance.md), where a W with nothing
// deferred takes microseconds.
TEST(PythonGpt, MitraLinearDefersTheWeightGradientsToW) {
  TempDir tmp;
  const std::string run_dir = tmp.Path("run");
  const testing::RunOutcome run = testing::MitraRun(
      tmp, run_dir, 2, 2, 3, {},
      {kPython, MITRA_PYTHON_GPT_TRAIN, "--model", "bench", "--schedule", "zb-h1"});
  ASSERT_EQ(run.result.exit_code, 0) << run.result.output();
  for (int rank : {0, 1}) {
    const std::string trace = testing::ReadFileOrEmpty(run_dir + "/logs/gen-0/rank-" +
                                                       std::to_string(rank) + ".trace.json");
    const nlohmann::json doc = nlohmann::json::parse(trace, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(doc.is_object()) << trace;
    double w = 0;
    int count = 0;
    for (const auto& e : doc.value("traceEvents", nlohmann::json::array())) {
      const std::string name = e.value("name", "");
      if (name.size() > 1 && name[0] == 'W' && std::isdigit(static_cast<unsigned char>(name[1]))) {
        w += e.value("dur", 0.0) / 1000;  // ms
        ++count;
      }
    }
    ASSERT_EQ(count, 4) << "rank " << rank << ": one W per micro-batch\n" << trace;
    EXPECT_GT(w / count, 1.0) << "rank " << rank << ": a W's mean ms";
  }
}

// bf16 autocast reaches the Python segments: the losses move, but stay within the precision
// tests' 2% of fp32 (tests/worker/precision_test.cc).
TEST(PythonGpt, Bf16AutocastReachesPythonSegments) {
  const testing::JobResult fp32 = testing::RunJob(kPython, 1, 1, PythonGpt({"--steps", "5"}));
  const testing::JobResult bf16 =
      testing::RunJob(kPython, 1, 1, PythonGpt({"--steps", "5", "--precision", "bf16"}));
  ASSERT_TRUE(fp32.ok() && bf16.ok()) << bf16.rank_output[0];
  ASSERT_EQ(bf16.losses.size(), 5u);
  EXPECT_NE(bf16.losses.back(), fp32.losses.back());
  EXPECT_NEAR(bf16.losses.back(), fp32.losses.back(), 0.02 * fp32.losses.back());
}

// The guard: the tolerance above is far tighter than what other dropout masks move (with and
// without dropout, the first loss differs by ~7.5e-4 here, 37 times the tolerance).
TEST(PythonGpt, TheToleranceSeesOtherDropoutMasks) {
  const testing::JobResult with = testing::RunJob(kPython, 1, 1, PythonGpt({"--steps", "1", "--dropout", "0.1"}));
  const testing::JobResult without = testing::RunJob(kPython, 1, 1, PythonGpt({"--steps", "1"}));
  ASSERT_TRUE(with.ok() && without.ok());
  EXPECT_GT(std::abs(with.losses.at(0) - without.losses.at(0)), 10 * kLossTolerance);
}

class PythonElastic : public testing::ElasticRun {
 protected:
  std::unique_ptr<testing::MitraProcess> Start(const testing::ElasticJob& job,
                                               const std::string& list, int stages,
                                               const std::vector<std::string>& flags = {}) {
    return StartJob(job, list, stages, flags);
  }
};

TEST_F(PythonElastic, AShrinkParksAndKeepsThePythonWorkersAndLosesNoStep) {
  const testing::ElasticJob job = testing::PythonGptJob(16, 40);
  ASSERT_FALSE(testing::Uninterrupted(job).losses.empty());
  auto mitra = Start(job, "localhost slots=4\n", 2);
  ASSERT_TRUE(mitra);
  const testing::MitraResult r = ShrinkToTwoSlots(*mitra);
  EXPECT_NE(r.out.find("2 workers kept, 0 started"), std::string::npos) << r.out;
  testing::ExpectSameTraining(job, run_dir_, trace_, /*consecutive=*/true);
  testing::ExpectNoProcessLeft(run_dir_);
}

// The new workers of a grow are Python processes too: each builds its stage's Python segments
// while it waits, and takes its state from a peer.
TEST_F(PythonElastic, AGrowStartsPythonWorkersFirstAndLosesNoStep) {
  const testing::ElasticJob job = testing::PythonGptJob(16, 120);
  ASSERT_FALSE(testing::Uninterrupted(job).losses.empty());
  auto mitra = Start(job, "localhost slots=2\n", 2);
  ASSERT_TRUE(mitra);
  const testing::MitraResult r = GrowToFourSlots(*mitra);
  EXPECT_NE(r.out.find("state: 2 kept, 2 from peers"), std::string::npos) << r.out;
  testing::ExpectSameTraining(job, run_dir_, trace_, /*consecutive=*/true);
  testing::ExpectNoProcessLeft(run_dir_);
}

TEST_F(PythonElastic, AKilledPythonWorkerIsRecoveredWithEverySampleOnce) {
  const testing::ElasticJob job = testing::PythonGptJob(16, 40);
  ASSERT_FALSE(testing::Uninterrupted(job).losses.empty());
  auto mitra = Start(job, "localhost slots=2\n", 2, {"--checkpoint-every", "1"});
  ASSERT_TRUE(mitra);
  ASSERT_TRUE(mitra->WaitForStdout("step 5/", 120)) << mitra->Stdout() << mitra->Stderr();
  const std::vector<pid_t> pids = testing::LaunchedPids(run_dir_);
  ASSERT_EQ(pids.size(), 2u);
  ASSERT_EQ(::kill(pids[1], SIGKILL), 0);
  testing::ExpectRecoveredFromAKilledWorker(job, mitra->Wait(180), run_dir_, trace_);
}

// A warm spare is a Python process started ahead (standby) and parked: it takes the killed
// rank's place without a process start.
TEST_F(PythonElastic, AKilledWorkersPlaceIsTakenByAPythonSpare) {
  const testing::ElasticJob job = testing::PythonGptJob(16, 120);
  ASSERT_FALSE(testing::Uninterrupted(job).losses.empty());
  auto mitra = Start(job, "localhost slots=2\n", 2, {"--checkpoint-every", "1", "--spares", "1"});
  ASSERT_TRUE(mitra);
  ASSERT_TRUE(mitra->WaitForStdout("step 5/", 120)) << mitra->Stdout() << mitra->Stderr();
  ASSERT_TRUE(testing::SpareParked(run_dir_, 60)) << mitra->Stdout() << mitra->Stderr();
  const std::vector<pid_t> pids = testing::LaunchedPids(run_dir_);
  ASSERT_EQ(pids.size(), 2u);
  ASSERT_EQ(::kill(pids[1], SIGKILL), 0);
  const testing::MitraResult r = mitra->Wait(180);
  ASSERT_EQ(r.exit_code, 0) << r.output();
  EXPECT_NE(r.out.find("recovery done: training again in 2 x 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2 workers kept, 0 started"), std::string::npos) << r.out;
  testing::ExpectSameTraining(job, run_dir_, trace_, /*consecutive=*/false);
  testing::ExpectNoProcessLeft(run_dir_);
}

TEST_F(PythonElastic, MitraStopEndsPythonWorkersAfterTheSameStep) {
  const testing::ElasticJob job = testing::PythonGptJob(16, 100000);
  auto mitra = Start(job, "localhost slots=2\n", 2);
  ASSERT_TRUE(mitra);
  ASSERT_TRUE(mitra->WaitForStdout("step 3/", 120)) << mitra->Stdout() << mitra->Stderr();
  const testing::MitraResult stop =
      testing::RunProgram(MITRA_BINARY, {"stop", "--run-dir", run_dir_, "--wait"}, tmp_.path(), 60);
  EXPECT_EQ(stop.exit_code, 0) << stop.output();
  const testing::MitraResult r = mitra->Wait(60);
  EXPECT_EQ(r.exit_code, 0) << r.output();
  EXPECT_NE(r.out.find("mitra: stopped at step "), std::string::npos) << r.out;
  testing::ExpectNoProcessLeft(run_dir_);
}

// Without --nstages the manager profiles the Python program and plans its shape; the report
// of the run is drawn like any other, and `mitra plan --validate` compares the plan with it.
TEST_F(PythonElastic, AProfiledAndPlannedPythonJobTrainsAndIsReported) {
  const testing::ElasticJob job = testing::PythonGptJob(16, 20);
  machines_ = tmp_.Write("machines.txt", "localhost slots=2\n");
  std::vector<std::string> args{"run", "--machines", machines_, "--batch-size", "16",
                                "--max-steps", "20", "--run-dir", run_dir_, "--"};
  args.insert(args.end(), job.program.begin(), job.program.end());
  const testing::MitraResult r = testing::RunProgram(MITRA_BINARY, args, tmp_.path(), 240);
  ASSERT_EQ(r.exit_code, 0) << r.output();
  EXPECT_NE(r.out.find("mitra: profiling the program on 2 slots"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("mitra: done: 20 steps"), std::string::npos) << r.out;
  EXPECT_FALSE(testing::EventsNamed(run_dir_, "launch").at(0).GetNumber("predicted_step_s") ==
               std::nullopt);
  const testing::MitraResult report =
      testing::RunProgram(MITRA_BINARY, {"report", run_dir_, "-o", tmp_.Path("r.html")}, tmp_.path(), 60);
  EXPECT_EQ(report.exit_code, 0) << report.output();
  EXPECT_NE(testing::ReadFileOrEmpty(tmp_.Path("r.html")).find("Chart"), std::string::npos);
  // The plan against what the run measured, read from the same records.
  const testing::MitraResult validate =
      testing::RunProgram(MITRA_BINARY, {"plan", "--validate", run_dir_}, tmp_.path(), 60);
  EXPECT_EQ(validate.exit_code, 0) << validate.output();
  EXPECT_NE(validate.out.find("mitra plan: generation 0 of " + run_dir_), std::string::npos)
      << validate.output();
  testing::ExpectNoProcessLeft(run_dir_);
}

// A Python exception in one rank's segment is a failure, never a hang: its peer notices the
// process gone, the manager restarts the job, and after --max-restarts it gives up.
TEST_F(PythonElastic, AnExceptionInASegmentIsAFailureAndTheManagerStopsAfterMaxRestarts) {
  testing::ElasticJob job{32, 100};
  job.chunk_size = 8;
  job.program = {kPython, MITRA_FAILING_WORKER, "--fail", "segment", "--on-stage", "0",
                 "--steps", "100"};
  auto mitra = Start(job, "localhost slots=2\n", 2, {"--max-restarts", "1"});
  ASSERT_TRUE(mitra);
  const testing::MitraResult r = mitra->Wait(120);
  EXPECT_FALSE(r.timed_out) << r.output();
  EXPECT_EQ(r.exit_code, 1) << r.output();
  EXPECT_EQ(testing::EventsNamed(run_dir_, "launch").size(), 2u) << r.output();
  EXPECT_NE(r.err.find("exited with code 1"), std::string::npos) << r.err;
  const std::string log = testing::ReadFileOrEmpty(run_dir_ + "/logs/gen-0/rank-0.log");
  EXPECT_NE(log.find("mitra: raised in the forward of segment 'mid'"), std::string::npos) << log;
  EXPECT_NE(log.find("ValueError: boom in the segment"), std::string::npos) << log;
  testing::ExpectNoProcessLeft(run_dir_);
}

}  // namespace
}  // namespace mitra
