// Elastic runs of the real GPT example under the real `mitra run`: the machine list edited while
// the job trains (a planned morph), a worker killed, a worker stopped (hung). Every run is
// compared with the same job trained without interruption: each step's loss, and which samples
// each step consumed, must be the same (no step lost, no sample skipped or repeated).
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/run_helpers.h"
#include "tests/worker/elastic_job.h"
#include "tests/worker/gpt_helpers.h"

namespace mitra {
namespace {

using testing::ExpectNoProcessLeft;
using testing::RewriteFile;
using testing::TempDir;

// ~40 ms a step for the tiny model: long enough to act mid-run, short enough for CI.
const testing::ElasticJob kJob{16, 40};
// Long enough for a grow's new workers to start (about a second) before the job ends.
const testing::ElasticJob kLongJob{16, 120};

// The ranks of generation `generation`'s launch that parked workers took.
std::vector<int64_t> KeptRanks(const std::string& run_dir, int64_t generation) {
  for (const JsonObject& launch : testing::EventsNamed(run_dir, "launch")) {
    if (launch.GetNumber("generation") != static_cast<double>(generation)) continue;
    std::vector<int64_t> kept;
    const JsonValue* value = launch.Find("kept");
    if (value == nullptr) return kept;
    const std::string text = value->string_value();  // a JSON array of numbers, as text
    for (size_t i = 0; i < text.size();) {
      if (std::isdigit(static_cast<unsigned char>(text[i]))) {
        size_t used = 0;
        kept.push_back(std::stoll(text.substr(i), &used));
        i += used;
      } else {
        ++i;
      }
    }
    return kept;
  }
  return {};
}

std::string PipelineFriendlyProfile(double send_latency_s);

class ElasticGpt : public testing::ElasticRun {
 protected:
  void SetUp() override { ASSERT_FALSE(testing::Uninterrupted(kJob).losses.empty()); }

  std::unique_ptr<testing::MitraProcess> Start(const std::string& list, int stages,
                                               const std::vector<std::string>& flags = {},
                                               const testing::ElasticJob& job = kJob) {
    return StartJob(job, list, stages, flags);
  }

  // `job` on `list`, its shapes planned from PipelineFriendlyProfile(send_latency_s); after its
  // second step the list becomes `next`. mitra run's result, checked to have ended well.
  testing::MitraResult RunPlannedThenChange(const testing::ElasticJob& job, const std::string& list,
                                            const std::string& next, double send_latency_s) {
    std::filesystem::create_directories(tmp_.Path("profile"));
    tmp_.Write("profile/profile.json", PipelineFriendlyProfile(send_latency_s));
    machines_ = tmp_.Write("machines.txt", list);
    std::vector<std::string> args{"run", "--machines", machines_, "--batch-size",
                                  std::to_string(job.batch_size), "--chunk-size", "4",
                                  "--max-steps", std::to_string(job.steps), "--run-dir", run_dir_,
                                  "--profile", tmp_.Path("profile"), "--"};
    for (const std::string& a : job.program) args.push_back(a);
    auto mitra = testing::MitraProcess::Start(MITRA_BINARY, args, tmp_.path(),
                                              {{"MITRA_TRACE_SAMPLES", trace_}});
    if (!mitra) {
      ADD_FAILURE() << "mitra run did not start";
      return {};
    }
    EXPECT_TRUE(mitra->WaitForStdout("step 2/", 120)) << mitra->Stdout() << mitra->Stderr();
    RewriteFile(tmp_, "machines.txt", next);
    testing::MitraResult r = mitra->Wait(180);
    EXPECT_EQ(r.exit_code, 0) << r.output();
    return r;
  }
};

TEST_F(ElasticGpt, ShrinkingTheMachineListMorphsWithoutLosingAStep) {
  auto mitra = Start("localhost slots=4\n", 2);
  ASSERT_TRUE(mitra);
  const testing::MitraResult r = ShrinkToTwoSlots(*mitra);
  // The two workers that stay were kept: no process started; and they kept their state, so no
  // checkpoint was written on the way.
  EXPECT_NE(r.out.find("2 workers kept, 0 started"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("keeping their state in memory"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("state: 2 kept, 0 from peers"), std::string::npos) << r.out;
  EXPECT_EQ(KeptRanks(run_dir_, 1), (std::vector<int64_t>{0, 1}));
  const auto launches = testing::EventsNamed(run_dir_, "launch");
  ASSERT_EQ(launches.size(), 2u);
  EXPECT_TRUE(testing::EventsNamed(run_dir_, "step_lost").empty());
  // Storage gets a copy in the background: the new generation's first step's.
  const int64_t resumed = static_cast<int64_t>(launches[1].GetNumber("resume_step").value_or(0));
  EXPECT_GT(resumed, 0);
  bool written = false;
  for (const JsonObject& c : testing::EventsNamed(run_dir_, "checkpoint")) {
    written |= c.GetNumber("step") == resumed + 1 && c.GetNumber("generation") == 1;
  }
  EXPECT_TRUE(written) << "no checkpoint of step " << resumed + 1 << " after the morph";
  testing::ExpectSameTraining(kJob, run_dir_, trace_, /*consecutive=*/true);
  ExpectNoProcessLeft(run_dir_);
}

// ZeRO-1: no rank holds its stage's whole optimizer state, so the shrink checkpoints first
// (SIGUSR2) and the kept workers resume from it; the job trains as the uninterrupted one (the
// update is computed once and sent, the same arithmetic).
TEST_F(ElasticGpt, AZeroOneJobShrinksThroughACheckpointAndTrainsTheSame) {
  auto mitra = Start("localhost slots=4\n", 2, {"--zero", "1"});
  ASSERT_TRUE(mitra);
  const testing::MitraResult r = ShrinkToTwoSlots(*mitra);
  EXPECT_NE(r.out.find("2 workers kept, 0 started"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("keeping their state in memory"), std::string::npos) << r.out;
  const auto morphs = testing::EventsNamed(run_dir_, "morph");
  ASSERT_FALSE(morphs.empty());
  EXPECT_EQ(morphs[0].GetString("state"), "checkpoint");
  testing::ExpectSameTraining(kJob, run_dir_, trace_, /*consecutive=*/true);
  ExpectNoProcessLeft(run_dir_);
}

// zb-v: a rank's segments are two ranges (a chunk at each end of the V), which it does not
// hold for the next generation; the shrink goes through a checkpoint the same way.
TEST_F(ElasticGpt, AZbVJobShrinksThroughACheckpointAndTrainsTheSame) {
  const testing::ElasticJob job{16, 40, testing::GptArgs({"--schedule", "zb-v"})};
  auto mitra = Start("localhost slots=4\n", 2, {}, job);
  ASSERT_TRUE(mitra);
  const testing::MitraResult r = ShrinkToTwoSlots(*mitra);
  EXPECT_NE(r.out.find("2 workers kept, 0 started"), std::string::npos) << r.out;
  const auto morphs = testing::EventsNamed(run_dir_, "morph");
  ASSERT_FALSE(morphs.empty());
  EXPECT_EQ(morphs[0].GetString("state"), "checkpoint");
  testing::ExpectSameTraining(job, run_dir_, trace_, /*consecutive=*/true);
  ExpectNoProcessLeft(run_dir_);
}

TEST_F(ElasticGpt, WithoutRegroupingAShrinkRestartsEveryWorkerAndTrainsTheSame) {
  auto mitra = Start("localhost slots=4\n", 2, {"--no-regroup"});
  ASSERT_TRUE(mitra);
  const testing::MitraResult r = ShrinkToTwoSlots(*mitra);
  EXPECT_EQ(r.out.find("kept"), std::string::npos) << r.out;
  EXPECT_TRUE(KeptRanks(run_dir_, 1).empty());
  testing::ExpectSameTraining(kJob, run_dir_, trace_, /*consecutive=*/true);
  ExpectNoProcessLeft(run_dir_);
}

TEST_F(ElasticGpt, GrowingTheMachineListStartsTheNewWorkersFirstAndKeepsEveryone) {
  auto mitra = Start("localhost slots=2\n", 2, {}, kLongJob);
  ASSERT_TRUE(mitra);
  const testing::MitraResult r = GrowToFourSlots(*mitra);
  // The new workers received their stages from the old ones, not from storage.
  EXPECT_NE(r.out.find("state: 2 kept, 2 from peers"), std::string::npos) << r.out;
  EXPECT_EQ(KeptRanks(run_dir_, 1), (std::vector<int64_t>{0, 1, 2, 3}));
  testing::ExpectSameTraining(kLongJob, run_dir_, trace_, /*consecutive=*/true);
  ExpectNoProcessLeft(run_dir_);
}

TEST_F(ElasticGpt, AKeptWorkerThatHangsDuringTheRegroupFallsBackToAFullRestart) {
  auto mitra = Start("localhost slots=4\n", 2, {"--heartbeat-timeout", "2"});
  ASSERT_TRUE(mitra);
  ASSERT_TRUE(mitra->WaitForStdout("step 2/", 120)) << mitra->Stdout() << mitra->Stderr();
  const std::vector<pid_t> pids = testing::LaunchedPids(run_dir_);
  ASSERT_EQ(pids.size(), 4u);
  RewriteFile(tmp_, "machines.txt", "localhost slots=2\n");
  // Rank 1 stays (2 x 1 keeps ranks 0 and 1): stopped as soon as it parks, it can never join
  // the regrouped generation, which fails before its first step.
  const std::string log = run_dir_ + "/logs/gen-0/rank-1.log";
  bool parked = false;
  for (int i = 0; i < 3000 && !parked; ++i) {
    parked = testing::ReadFileOrEmpty(log).find("\"event\":\"parked\"") != std::string::npos;
    if (!parked) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(parked) << testing::ReadFileOrEmpty(log);
  ASSERT_EQ(::kill(pids[1], SIGSTOP), 0);
  const testing::MitraResult r = mitra->Wait(180);
  ASSERT_EQ(r.exit_code, 0) << r.output();
  EXPECT_NE(r.err.find("while regrouping in place: every worker starts afresh"), std::string::npos)
      << r.output();
  EXPECT_EQ(KeptRanks(run_dir_, 1), (std::vector<int64_t>{0, 1}));
  EXPECT_TRUE(KeptRanks(run_dir_, 2).empty());  // the relaunch started every worker
  testing::ExpectSameTraining(kJob, run_dir_, trace_, /*consecutive=*/false);
  ExpectNoProcessLeft(run_dir_);
}

// A grow whose new workers take their stages from the kept ones, and one of those dies as the
// exchange begins (killed when the new generation's launch is recorded: before or while it
// sends). The generation fails before its first step; the job goes back to what storage holds
// for the stage no survivor holds, and trains every step as the uninterrupted job.
TEST_F(ElasticGpt, AKeptWorkerThatDiesDuringTheExchangeFallsBackWithNothingLost) {
  auto mitra = Start("localhost slots=2\n", 2, {"--checkpoint-every", "2"}, kLongJob);
  ASSERT_TRUE(mitra);
  ASSERT_TRUE(mitra->WaitForStdout("step 2/", 120)) << mitra->Stdout() << mitra->Stderr();
  const std::vector<pid_t> pids = testing::LaunchedPids(run_dir_);
  ASSERT_EQ(pids.size(), 2u);
  RewriteFile(tmp_, "machines.txt", "localhost slots=4\n");
  // Rank 1 holds stage 1, which the grow's new rank 3 needs.
  bool launched = false;
  for (int i = 0; i < 12000 && !launched; ++i) {
    for (const JsonObject& launch : testing::EventsNamed(run_dir_, "launch")) {
      launched |= launch.GetNumber("generation") == 1.0;
    }
    if (!launched) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_TRUE(launched) << mitra->Stdout() << mitra->Stderr();
  ASSERT_EQ(::kill(pids[1], SIGKILL), 0);
  const testing::MitraResult r = mitra->Wait(180);
  ASSERT_EQ(r.exit_code, 0) << r.output();
  EXPECT_NE(r.err.find("was killed by signal SIGKILL"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("while regrouping in place: every worker starts afresh"), std::string::npos)
      << r.output();
  // Resumed by new processes from the newest checkpoint (every 2 steps), not from step 0.
  const auto launches = testing::EventsNamed(run_dir_, "launch");
  ASSERT_EQ(launches.size(), 3u) << r.output();
  EXPECT_TRUE(KeptRanks(run_dir_, 2).empty());
  const double resumed = launches[2].GetNumber("resume_step").value_or(0);
  EXPECT_GT(resumed, 0);
  EXPECT_LE(resumed, launches[1].GetNumber("resume_step").value_or(0));
  testing::ExpectSameTraining(kLongJob, run_dir_, trace_, /*consecutive=*/false);
  ExpectNoProcessLeft(run_dir_);
}

// The image classifier: BatchNorm (its micro-batch size is kept for the job when none is given:
// 32 for a batch of 128 in 1 x 1, where 1 x 2 alone would take 16; and the replicas' running
// statistics are merged every step) and dropout (drawn per micro-batch and segment), evaluated
// every 50 steps; ~50 ms a step, so that the job's 100 steps last the seconds a grow's new
// worker takes to start on a slow, busy machine (at 16 samples a step it ended first).
//
// Tolerance: this network amplifies fp32 rounding much more than the GPT does. The same job
// uninterrupted in 1 x 1 and in 1 x 2 (the same math in another order, micro-batches of 32 in
// both) differs by 9.2e-6 by step 50 and 4.0e-5 by step 100 (measured with these settings).
// We allow 2e-3: what this test guards against moves the loss at once and by more: micro-batches
// of another size (1 x 2 choosing its own 16: over 2e-3 apart from step 2, up to 0.087), other
// dropout masks, a lost or repeated micro-batch (the sample trace checks that exactly as well).
const testing::ElasticJob kClassifierJob{
    128, 100,
    {MITRA_FASHION_TRAIN, "--width", "16", "--train-samples", "1024", "--test-samples", "64",
     "--dropout", "0.2", "--eval-every", "50", "--lr", "0.001", "--warmup", "0",
     "--cosine-steps", "0", "--seed", "3"},
    /*chunk_size=*/0, /*loss_tolerance=*/2e-3};

TEST_F(ElasticGpt, AClassifierWithBatchNormAndDropoutGrowsKeepingItsMicroBatches) {
  auto mitra = Start("localhost slots=1\n", 1, {}, kClassifierJob);
  ASSERT_TRUE(mitra);
  ASSERT_TRUE(mitra->WaitForStdout("step 10/", 120)) << mitra->Stdout() << mitra->Stderr();
  RewriteFile(tmp_, "machines.txt", "localhost slots=2\n");
  const testing::MitraResult r = mitra->Wait(180);
  ASSERT_EQ(r.exit_code, 0) << r.output();
  EXPECT_NE(r.out.find("micro-batches of 32 (kept for the job"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("mitra: morph done: training again in 1 x 2"), std::string::npos) << r.out;
  const auto launches = testing::EventsNamed(run_dir_, "launch");
  ASSERT_EQ(launches.size(), 2u);
  for (const JsonObject& launch : launches) EXPECT_EQ(launch.GetNumber("chunk_size"), 32);
  testing::ExpectSameTraining(kClassifierJob, run_dir_, trace_, /*consecutive=*/true);
  ExpectNoProcessLeft(run_dir_);
}

// A profile of the tiny GPT (4 segments) made up so that pipelines win: an all-reduce costs
// seconds (so one replica is best) and messages are free, so 4 slots train in 4 x 1 and 2 in
// 2 x 1. Costs scale with the micro-batch; every machine shares nothing.
// `send_latency_s`: what each send costs its caller (0: sends are free; 0.02 keeps the planner
// on one chunk per rank, whose schedules send half the messages).
std::string PipelineFriendlyProfile(double send_latency_s) {
  std::string segments;
  for (const char* name : {"embed", "block0", "block1", "head"}) {
    std::string costs;
    for (int mb : {1, 2, 4, 8, 16}) {
      costs += std::string(costs.empty() ? "" : ",") + "{\"micro_batch\":" + std::to_string(mb) +
               ",\"forward_s\":" + std::to_string(0.002 * mb) +
               ",\"forward_nograd_s\":" + std::to_string(0.002 * mb) +
               ",\"backward_s\":" + std::to_string(0.004 * mb) +
               ",\"output_bytes\":" + std::to_string(16384 * mb) +
               ",\"graph_bytes\":" + std::to_string(65536 * mb) + "}";
    }
    segments += std::string(segments.empty() ? "" : ",") + "{\"name\":\"" + name +
                "\",\"parameters\":10000,\"parameter_bytes\":40000,\"buffer_bytes\":0,"
                "\"optimizer_bytes\":80000,\"update_s\":0,\"costs\":[" + costs + "]}";
  }
  return "{\"format\":1,\"program\":\"gpt_train\",\"program_args\":[],"
         "\"micro_batches\":[1,2,4,8,16],\"machines\":[{\"address\":\"localhost\","
         "\"slots\":4,\"memory_bytes\":0,\"sample_s\":0,\"speed\":[1,1,1,1],\"segments\":[" +
         segments + "]}],\"comm\":{\"step_sync_s\":0,\"links\":[" +
         (send_latency_s > 0
              ? "{\"from\":\"localhost\",\"to\":\"localhost\",\"latency_s\":0,"
                "\"bytes_per_s\":1e12,\"samples\":[],\"send_latency_s\":" +
                    std::to_string(send_latency_s) + ",\"send_bytes_per_s\":1e12}"
              : "") +
         "],\"allreduce\":"
         "[{\"group\":2,\"latency_s\":10,\"bytes_per_s\":1e9,\"samples\":[]}]}}";
}

TEST_F(ElasticGpt, PlannedShapesChangeTheStagesAtAMorphAndTrainTheSame) {
  const testing::ElasticJob& job = kJob;
  const testing::MitraResult r =
      RunPlannedThenChange(job, "localhost slots=4\n", "localhost slots=2\n", 0);
  ASSERT_EQ(r.exit_code, 0);
  const auto launches = testing::EventsNamed(run_dir_, "launch");
  ASSERT_EQ(launches.size(), 2u);
  EXPECT_EQ(launches[0].GetNumber("stages"), 4);
  EXPECT_EQ(launches[0].GetString("partition"), "1,1,1,1");
  // At 2 stages the 4 segments give each rank two chunks, and with this profile's free messages
  // interleaved halves 1F1B's bubble: the morph changes the schedule too (the two kept workers
  // hold segments 0 and 1; 2 and 3, their second chunks, come from the checkpoint).
  EXPECT_EQ(launches[0].GetString("schedule"), "1f1b");
  EXPECT_EQ(launches[1].GetNumber("stages"), 2);
  EXPECT_EQ(launches[1].GetString("schedule"), "interleaved");
  EXPECT_EQ(launches[1].GetString("partition"), "1,1,1,1");
  EXPECT_GT(launches[1].GetNumber("predicted_step_s").value_or(0), 0);
  EXPECT_NE(r.out.find("mitra: morph done: training again in 2 x 1"), std::string::npos) << r.out;
  testing::ExpectSameTraining(job, run_dir_, trace_, /*consecutive=*/true);
  ExpectNoProcessLeft(run_dir_);
}

// A change of P from memory, 2 x 1 -> 4 x 1 on one machine (stages of 2, 2 -> 1, 1, 1, 1
// segments). The tiny GPT's blocks outweigh its embedding and head, so each kept worker takes
// its block's rank (not the rank of its slot in the grid's order: stage 1 for the second,
// which holds nothing of it), only the embedding and the head move, and each standby worker
// builds the stage that its slot's rank gets.
// The batch makes steps long enough for the grow to come before the job's 23rd step, where the
// manager checks the profile's predictions: this made-up profile's would be corrected for 2 busy
// processes only, and 2 x 1 kept.
TEST_F(ElasticGpt, AChangeOfPKeepsWhatEachWorkerHoldsInPlaceAndTrainsTheSame) {
  const testing::ElasticJob job{256, 40};
  const testing::MitraResult r = RunPlannedThenChange(job, "localhost slots=2\n",
                                                      "localhost slots=4\n", /*send_latency_s=*/0.005);
  ASSERT_EQ(r.exit_code, 0);
  const auto launches = testing::EventsNamed(run_dir_, "launch");
  ASSERT_EQ(launches.size(), 2u) << r.output();
  EXPECT_EQ(launches[0].GetString("schedule"), "1f1b");
  EXPECT_EQ(launches[0].GetString("partition"), "2,2");
  EXPECT_EQ(launches[1].GetString("schedule"), "1f1b");
  EXPECT_EQ(launches[1].GetString("partition"), "1,1,1,1");
  const std::vector<pid_t> before = testing::LaunchPids(launches[0]);
  const std::vector<pid_t> after = testing::LaunchPids(launches[1]);
  ASSERT_EQ(before.size(), 2u);
  ASSERT_EQ(after.size(), 4u);
  EXPECT_EQ(after[1], before[0]);  // the worker of embed and block0 is block0's stage
  EXPECT_EQ(after[2], before[1]);  // the worker of block1 and head is block1's
  EXPECT_NE(r.out.find("4 workers kept, 0 started; state: 2 kept, 2 from peers"),
            std::string::npos) << r.out;
  for (const std::string id : {"0", "1"}) {
    const std::string log = testing::ReadFileOrEmpty(run_dir_ + "/logs/standby-" + id + ".log");
    const bool first = log.find("standby: built segments 0..0 (stage 0 of 4)") != std::string::npos;
    const bool last = log.find("standby: built segments 3..3 (stage 3 of 4)") != std::string::npos;
    EXPECT_TRUE(first || last) << log;
  }
  testing::ExpectSameTraining(job, run_dir_, trace_, /*consecutive=*/true);
  ExpectNoProcessLeft(run_dir_);
}

TEST_F(ElasticGpt, AKilledWorkerIsRecoveredFromTheNewestCheckpoint) {
  auto mitra = Start("localhost slots=2\n", 2, {"--checkpoint-every", "1"});
  ASSERT_TRUE(mitra);
  ASSERT_TRUE(mitra->WaitForStdout("step 5/", 120)) << mitra->Stdout() << mitra->Stderr();
  const std::vector<pid_t> pids = testing::LaunchedPids(run_dir_);
  ASSERT_EQ(pids.size(), 2u);
  ASSERT_EQ(::kill(pids[1], SIGKILL), 0);
  testing::ExpectRecoveredFromAKilledWorker(kJob, mitra->Wait(180), run_dir_, trace_);
}

TEST_F(ElasticGpt, AKilledWorkersPlaceIsTakenByASpareAndItsPeerIsKept) {
  auto mitra = Start("localhost slots=2\n", 2, {"--checkpoint-every", "1", "--spares", "1"},
                     kLongJob);
  ASSERT_TRUE(mitra);
  ASSERT_TRUE(mitra->WaitForStdout("step 5/", 120)) << mitra->Stdout() << mitra->Stderr();
  ASSERT_TRUE(testing::SpareParked(run_dir_, 60)) << mitra->Stdout() << mitra->Stderr();
  // The spare built a stage of the running grid while it waited (a machine's first: stage 0).
  EXPECT_NE(testing::ReadFileOrEmpty(run_dir_ + "/logs/standby-0.log")
                .find("standby: built segments 0..1 (stage 0 of 2) and "),
            std::string::npos)
      << testing::ReadFileOrEmpty(run_dir_ + "/logs/standby-0.log");
  const std::vector<pid_t> pids = testing::LaunchedPids(run_dir_);
  ASSERT_EQ(pids.size(), 2u);
  ASSERT_EQ(::kill(pids[1], SIGKILL), 0);
  const testing::MitraResult r = mitra->Wait(180);
  ASSERT_EQ(r.exit_code, 0) << r.output();
  EXPECT_NE(r.err.find("was killed by signal SIGKILL"), std::string::npos) << r.err;
  // The survivor parked when its peer vanished; the spare took the dead rank's place (stage 1:
  // it builds that stage's segments now, and lets stage 0's go).
  EXPECT_NE(r.out.find("recovery done: training again in 2 x 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2 workers kept, 0 started"), std::string::npos) << r.out;
  EXPECT_EQ(KeptRanks(run_dir_, 1), (std::vector<int64_t>{0, 1}));
  testing::ExpectSameTraining(kLongJob, run_dir_, trace_, /*consecutive=*/false);
  ExpectNoProcessLeft(run_dir_);
}

// 2 x 2 with a spare and the default checkpoint interval (no checkpoint before the kill): the
// killed rank's replica heals its replacement, and the job goes on from the step the survivors
// completed. Only a step the kill struck after a survivor passed its all-reduce (a window of
// microseconds) could be trained again.
TEST_F(ElasticGpt, AKilledWorkerIsHealedFromItsReplicaWithoutTrainingAStepAgain) {
  auto mitra = Start("localhost slots=4\n", 2, {"--spares", "1"}, kLongJob);
  ASSERT_TRUE(mitra);
  ASSERT_TRUE(mitra->WaitForStdout("step 5/", 120)) << mitra->Stdout() << mitra->Stderr();
  ASSERT_TRUE(testing::SpareParked(run_dir_, 60)) << mitra->Stdout() << mitra->Stderr();
  const std::vector<pid_t> pids = testing::LaunchedPids(run_dir_);
  ASSERT_EQ(pids.size(), 4u);
  // Rank 3 is the last stage's second replica: it holds the output layer tied to stage 0's
  // embedding, so its replacement's initial values must reach no copy of it. Not stage 0's
  // replica: a stage-0 rank killed anywhere between its last forward send and its all-reduce
  // (its whole last backward) leaves the last stage to finish that step without it, and that
  // step of stage 0 then exists nowhere (seen in 2 of 20 runs here); a last-stage rank's window
  // is the microseconds between its last gradient send and its all-reduce.
  ASSERT_EQ(testing::EventsNamed(run_dir_, "launch")[0].GetString("stage_to_rank_map"),
            "0,2;1,3;");
  ASSERT_EQ(::kill(pids[3], SIGKILL), 0);
  const testing::MitraResult r = mitra->Wait(180);
  ASSERT_EQ(r.exit_code, 0) << r.output();
  EXPECT_NE(r.out.find("recovery done: training again in 2 x 2"), std::string::npos) << r.out;
  EXPECT_TRUE(testing::EventsNamed(run_dir_, "checkpoint").size() <= 2u);  // the heal's, the end's
  // Steps trained again: records of a step beyond its first.
  std::map<int64_t, int> trained;
  for (const JsonObject& m : testing::StepRecords(
           testing::ReadJsonLines(run_dir_ + "/metrics.jsonl"))) {
    ++trained[static_cast<int64_t>(m.GetNumber("step").value_or(0))];
  }
  int again = 0;
  for (const auto& [step, times] : trained) again += times - 1;
  EXPECT_LE(again, 1) << "steps trained again after the heal";
  // In that window a survivor that passed the all-reduce holds the step after the one the
  // others hold: its stage then comes from its replica, like the killed rank's (whether the
  // step trained again shows depends on which rank passed: rank 0 records the steps).
  EXPECT_TRUE(r.out.find("state: 3 kept, 1 from peers") != std::string::npos ||
              r.out.find("state: 2 kept, 2 from peers") != std::string::npos)
      << r.out;
  testing::ExpectSameTraining(kLongJob, run_dir_, trace_, /*consecutive=*/false);
  ExpectNoProcessLeft(run_dir_);
}

// Chaos: machine-list edits (4 <-> 2 slots), killed and stopped workers at random points of a
// long 2-stage job that checkpoints every 50 steps, one event 60 steps after the job trains again
// from the one before (so that no two fold into one change). Every loss and every sample must be
// the uninterrupted job's, and every change whose kept workers can hold every stage's state must
// resume from it, at most the step a failure struck trained again (never back to a checkpoint):
// every list edit (2 x 2 keeps a worker of each stage on the first two slots, 2 x 1 keeps both),
// and every failure of a 2 x 2 generation (the failed rank's stage has a replica). A failure of a
// 2 x 1 generation goes back to the newest checkpoint.
//
// Tolerance. Over 900 steps fp32 reordering alone moves the loss further than over the other
// jobs' 40-120: uninterrupted, 2 x 2 differed from 1 x 1 by up to 9.86e-5 (above 2e-5 from step
// 397 on), 1 x 4 by up to 8.56e-5, 2 x 1 not at all (measured with this job's settings). We
// allow 4e-4; a wrong state moves it at once and by far more (a kept tied copy overwritten by a
// new rank's initial values: 0.06).
const testing::ElasticJob kChaosJob{16, 900, testing::GptArgs(), 4, 4e-4};

const JsonObject* NewestLaunch(const std::vector<JsonObject>& launches) {
  return launches.empty() ? nullptr : &launches.back();
}

TEST_F(ElasticGpt, ChaosTrainsEveryStepAsTheUninterruptedJobAndHealsWithoutGoingBack) {
  ASSERT_FALSE(testing::Uninterrupted(kChaosJob).losses.empty());
  auto mitra = Start("localhost slots=4\n", 2,
                     {"--checkpoint-every", "50", "--spares", "1", "--heartbeat-timeout", "2",
                      "--max-restarts", "20"},
                     kChaosJob);
  ASSERT_TRUE(mitra);
  std::mt19937 random(2026);
  int slots = 4;
  std::vector<std::string> done;
  size_t changes = 0;   // each ends with a "training again" line
  int can_hold = 0;     // changes whose kept workers can hold every stage's state
  for (int64_t at = 60; at < kChaosJob.steps - 120; at += 60) {
    if (!mitra->WaitForStdout("training again in ", 120, changes)) break;
    if (!mitra->WaitForStdout("step " + std::to_string(at) + "/", 120)) break;
    const std::vector<JsonObject> launches = testing::EventsNamed(run_dir_, "launch");
    const JsonObject* newest = NewestLaunch(launches);
    if (newest == nullptr) break;
    const std::vector<pid_t> pids = testing::LaunchPids(*newest);
    const bool replicated = newest->GetNumber("replicas").value_or(1) >= 2;
    switch (random() % 3) {
      case 0:
        slots = slots == 4 ? 2 : 4;
        RewriteFile(tmp_, "machines.txt", "localhost slots=" + std::to_string(slots) + "\n");
        done.push_back("list " + std::to_string(slots));
        ++can_hold;
        break;
      case 1:
        ::kill(pids[random() % pids.size()], SIGKILL);
        done.push_back(replicated ? "kill" : "kill (no replica)");
        can_hold += replicated;
        break;
      default:
        ::kill(pids[random() % pids.size()], SIGSTOP);
        done.push_back(replicated ? "stop" : "stop (no replica)");
        can_hold += replicated;
        break;
    }
    ++changes;
  }
  const testing::MitraResult r = mitra->Wait(600);
  ASSERT_EQ(r.exit_code, 0) << r.output();
  SCOPED_TRACE("events: " + [&] {
    std::string all;
    for (const std::string& e : done) all += e + "; ";
    return all;
  }());
  EXPECT_GE(done.size(), 10u);
  testing::ExpectSameTraining(kChaosJob, run_dir_, trace_, /*consecutive=*/false);
  // Each launch that resumed from the kept workers' state went back at most one step from the
  // newest step trained before it.
  int64_t newest = 0;
  size_t launch = 0;
  int from_memory = 0;  // launches that resumed from the kept workers' state
  const auto launches = testing::EventsNamed(run_dir_, "launch");
  for (const JsonObject& m : testing::StepRecords(
           testing::ReadJsonLines(run_dir_ + "/metrics.jsonl"))) {
    const int64_t generation = static_cast<int64_t>(m.GetNumber("generation").value_or(0));
    while (launch < launches.size() &&
           launches[launch].GetNumber("generation").value_or(0) <= generation) {
      const JsonObject& l = launches[launch++];
      if (l.GetNumber("held_step") && l.GetNumber("held_step") == l.GetNumber("resume_step")) {
        ++from_memory;
        EXPECT_LE(newest - static_cast<int64_t>(l.GetNumber("resume_step").value_or(0)), 1)
            << "generation " << l.GetNumber("generation").value_or(0) << " went back";
      }
    }
    newest = std::max(newest, static_cast<int64_t>(m.GetNumber("step").value_or(0)));
  }
  EXPECT_EQ(launches.size(), changes + 1) << "changes folded into one";
  EXPECT_EQ(from_memory, can_hold) << "changes that could have resumed from memory did not\n"
                                   << r.output() << "\nlaunches:\n" << [&] {
                                        std::string all;
                                        for (const JsonObject& l : launches) {
                                          all += l.ToJson() + "\n";
                                        }
                                        return all;
                                      }();
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
  testing::ExpectSameTraining(kJob, run_dir_, trace_, /*consecutive=*/false);
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

  auto second = testing::MitraProcess::Start(MITRA_BINARY, testing::RunArgs(kJob, machines_, run_dir_, 2),
                                             tmp_.path(), {{"MITRA_TRACE_SAMPLES", trace_}});
  ASSERT_TRUE(second);
  const testing::MitraResult r = second->Wait(180);
  ASSERT_EQ(r.exit_code, 0) << r.output();
  EXPECT_NE(r.out.find("mitra: resuming from " + run_dir_ + "/checkpoints/step-"),
            std::string::npos)
      << r.out;
  testing::ExpectSameTraining(kJob, run_dir_, trace_, /*consecutive=*/false);
  ExpectNoProcessLeft(run_dir_);
}

}  // namespace
}  // namespace mitra
