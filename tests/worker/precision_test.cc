// Mixed precision end to end, with real worker processes over Gloo: bf16 trains the tiny GPT as
// well as fp32 and the same in every shape; the loss scaler skips a step on every rank when one
// stage's gradients overflow, and its scale survives a checkpoint; what this CPU build cannot
// do (fp16, cuda, nccl) is refused with exit code 2 and what to do instead.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <tuple>

#include "tests/worker/job_runner.h"

namespace mitra {
namespace {

std::vector<std::string> Gpt(const std::string& precision, int steps) {
  return {"--model", "tiny", "--seed", "77", "--batch-size", "16", "--chunk-size", "4",
          "--lr", "1e-3", "--precision", precision, "--steps", std::to_string(steps)};
}

double Mean(const std::vector<double>& v, size_t from) {
  double sum = 0;
  for (size_t i = from; i < v.size(); ++i) sum += v[i];
  return sum / static_cast<double>(v.size() - from);
}

// bf16 keeps 8 bits of mantissa (relative rounding 2^-9) in the matrix products; the weights,
// the optimizer and the loss stay fp32. Trained for 50 steps on the same batches, the loss
// must stay within 2% of fp32's: the bar. (We saw 0.003%: the tiny model's products are
// short sums, and the updates are fp32.) A bf16 optimizer or master weights (updates of 1e-3
// lost against weights of ~1 in bf16) would stall training and miss it; so would a broken
// backward.
TEST(Precision, Bf16TrainsTheTinyGptToWithinTwoPercentOfFp32) {
  constexpr int kSteps = 50;
  auto fp32 = testing::RunJob(MITRA_GPT_TRAIN, 1, 1, Gpt("fp32", kSteps), {}, 300);
  ASSERT_TRUE(fp32.ok()) << fp32.rank_output[0];
  auto bf16 = testing::RunJob(MITRA_GPT_TRAIN, 1, 1, Gpt("bf16", kSteps), {}, 300);
  ASSERT_TRUE(bf16.ok()) << bf16.rank_output[0];
  ASSERT_EQ(fp32.losses.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(bf16.losses.size(), static_cast<size_t>(kSteps));
  // The last step's loss, and the mean of the last ten (less noisy: one batch can be hard).
  const double last32 = fp32.losses.back(), last16 = bf16.losses.back();
  const double mean32 = Mean(fp32.losses, kSteps - 10), mean16 = Mean(bf16.losses, kSteps - 10);
  std::printf("after %d steps: fp32 loss %.5f, bf16 loss %.5f (%.3f%%); last 10 steps' mean "
              "fp32 %.5f, bf16 %.5f (%.3f%%); first step fp32 %.5f, bf16 %.5f\n",
              kSteps, last32, last16, 100 * (last16 - last32) / last32, mean32, mean16,
              100 * (mean16 - mean32) / mean32, fp32.losses[0], bf16.losses[0]);
  EXPECT_LT(last32, fp32.losses[0] - 0.5) << "fp32 did not learn: the comparison means nothing";
  EXPECT_NEAR(last16, last32, 0.02 * last32);
  EXPECT_NEAR(mean16, mean32, 0.02 * mean32);
  // bf16 really ran: its losses are not fp32's to the last digit.
  EXPECT_NE(fp32.losses, bf16.losses) << "bf16 computed exactly what fp32 did: autocast is off";
}

// Every shape runs the same bf16 products on the same micro-batches (the micro-batch is fixed):
// what differs is how fp32 gradients are summed (micro-batches vs replicas, tied copies), a
// ~1e-6 relative reordering, and for 2 stages that the hidden state crosses a process (fp32:
// the residual sum promotes it, so 2 x 1 computes exactly what 1 x 1 does). A reordering can
// flip the bf16 rounding of single weights in later steps (2^-9 relative each), whose effect
// on a mean loss of ~5 mostly averages out: we saw 4e-5 at 1 x 2 after 8 steps and 0 at 2 x 1.
// 5e-4 (1e-4 relative) leaves ten times that, and is still 20x below what a lost micro-batch or
// a replica's missing gradient moves the loss (> 1e-2 after one step).
TEST(Precision, Bf16GivesTheSameLossesAtTwoStagesAndTwoReplicas) {
  constexpr int kSteps = 8;
  auto one = testing::RunJob(MITRA_GPT_TRAIN, 1, 1, Gpt("bf16", kSteps));
  ASSERT_TRUE(one.ok()) << one.rank_output[0];
  ASSERT_EQ(one.losses.size(), static_cast<size_t>(kSteps));
  // zb-h1's W multiplies in bf16 as autocast's own backward does (mitra/cutpoint/linear.h).
  for (auto [stages, replicas, schedule] :
       {std::tuple{2, 1, "1f1b"}, std::tuple{1, 2, "1f1b"}, std::tuple{2, 1, "zb-h1"}}) {
    auto args = Gpt("bf16", kSteps);
    args.insert(args.end(), {"--schedule", schedule});
    auto run = testing::RunJob(MITRA_GPT_TRAIN, stages, replicas, args);
    ASSERT_TRUE(run.ok()) << run.rank_output.back();
    ASSERT_EQ(run.losses.size(), one.losses.size());
    double worst = 0;
    for (size_t k = 0; k < one.losses.size(); ++k) {
      worst = std::max(worst, std::abs(run.losses[k] - one.losses[k]));
      EXPECT_NEAR(run.losses[k], one.losses[k], 5e-4) << stages << "x" << replicas << " step " << k + 1;
    }
    std::printf("bf16 %dx%d %s vs 1x1: largest loss difference over %d steps %.2e (step 1: %.6f "
                "vs %.6f)\n",
                stages, replicas, schedule, kSteps, worst, run.losses[0], one.losses[0]);
  }
}

std::string OverflowTrain() { return MITRA_OVERFLOW_TRAIN; }

// A Linear's output under bf16 autocast is bf16: at 2 x 1 it crosses the stage boundary as bf16
// (the header carries the dtype) and its bf16 gradient comes back. The two stages compute what
// one stage computes, bit for bit; a receiver that took the bytes for fp32 would see half as
// many elements and fail, or compute something else.
TEST(Precision, Bf16ActivationsCrossStagesWithTheirDtype) {
  const std::vector<std::string> args{"--attached", "1", "--precision", "bf16", "--steps", "4"};
  auto one = testing::RunJob(OverflowTrain(), 1, 1, args);
  ASSERT_TRUE(one.ok()) << one.rank_output[0];
  auto two = testing::RunJob(OverflowTrain(), 2, 1, args);
  ASSERT_TRUE(two.ok()) << two.rank_output[0] << two.rank_output[1];
  ASSERT_EQ(one.losses.size(), 4u);
  EXPECT_EQ(two.losses, one.losses);
  auto fp32 = args;
  fp32[3] = "fp32";
  EXPECT_NE(testing::RunJob(OverflowTrain(), 1, 1, fp32).losses, one.losses)
      << "bf16 computed what fp32 does: no bf16 reached the boundary";
}

// 2^40: the step with the bad sample (weight 1e30) overflows fp32 on stage 1 (1e30 / 8 * 2^40 >
// 3.4e38); the others' gradients (~2^40 / 8) and their squared norms stay finite.
constexpr double kHugeScale = 1099511627776.0;

// Stage 0 never sees a non-finite gradient (its gradients are zeros); stage 1's overflow in the
// step that takes sample 16 (step 3: the sampler is sequential, 8 samples a step). Rank 0 (stage
// 0) must skip that step as rank 1 does, since the decision is the all-reduced norm's; its
// parameters are then unchanged by step 3, though weight decay changes them in every step that
// is taken.
TEST(LossScaler, EveryRankSkipsTheStepWhenOnlyOneStagesGradientsOverflow) {
  auto run = [](int steps, int bad, const std::string& dump) {
    return testing::RunJob(OverflowTrain(), 2, 1,
                           {"--bad", std::to_string(bad), "--loss-scale",
                            std::to_string(kHugeScale), "--steps", std::to_string(steps),
                            "--dump-params", dump});
  };
  const std::string two = testing::MakeTempDir("mitra-ovf"), three = testing::MakeTempDir("mitra-ovf"),
                    clean = testing::MakeTempDir("mitra-ovf");
  auto after_two = run(2, 16, two);
  ASSERT_TRUE(after_two.ok()) << after_two.rank_output[1];
  auto after_three = run(3, 16, three);
  ASSERT_TRUE(after_three.ok()) << after_three.rank_output[1];
  auto no_overflow = run(3, -1, clean);
  ASSERT_TRUE(no_overflow.ok()) << no_overflow.rank_output[1];

  // Rank 0's records: steps 1 and 2 taken at 2^40, step 3 skipped, the scale halved after.
  std::vector<std::pair<double, bool>> seen;  // (loss_scale, skipped) per step record
  for (const auto& r : after_three.records) {
    if (r.GetString("event").value_or("") != "step") continue;
    const JsonValue* skipped = r.Find("skipped");
    seen.emplace_back(r.GetNumber("loss_scale").value_or(-1), skipped && skipped->bool_value());
  }
  ASSERT_EQ(seen.size(), 3u) << after_three.rank_output[0];
  EXPECT_EQ(seen[0], std::make_pair(kHugeScale, false));
  EXPECT_EQ(seen[1], std::make_pair(kHugeScale, false));
  EXPECT_EQ(seen[2], std::make_pair(kHugeScale, true)) << "rank 0 did not skip the step";
  EXPECT_NE(after_three.rank_output[1].find("step 3 loss"), std::string::npos);
  EXPECT_NE(after_three.rank_output[1].find("(skipped"), std::string::npos) << "rank 1 did not skip";

  // Stage 0's parameters: unchanged by the skipped step, changed by a taken one.
  auto a = testing::LoadTensorDict(two + "/stage-0.pt");
  auto b = testing::LoadTensorDict(three + "/stage-0.pt");
  auto c = testing::LoadTensorDict(clean + "/stage-0.pt");
  ASSERT_FALSE(a.empty());
  for (const auto& [name, t] : a) {
    EXPECT_TRUE(torch::equal(t, b.at(name))) << name << " changed in the skipped step";
    EXPECT_FALSE(torch::equal(t, c.at(name))) << name << ": a taken step would have changed it";
  }
  for (const auto& d : {two, three, clean}) std::filesystem::remove_all(d);
}

// The scale is training state: a resumed job goes on with the scale the checkpoint holds, and a
// checkpoint written without loss scaling resumes at the initial scale.
TEST(LossScaler, TheScaleIsKeptInTheCheckpoint) {
  const std::string dir = testing::MakeTempDir("mitra-ovf-ck");
  const std::map<std::string, std::string> env{{"MITRA_CHECKPOINT_DIR", dir}};
  auto first = testing::RunJob(OverflowTrain(), 1, 1,
                               {"--bad", "16", "--loss-scale", std::to_string(kHugeScale),
                                "--steps", "4"},
                               env);
  ASSERT_TRUE(first.ok()) << first.rank_output[0];
  auto trainer = testing::LoadTensorDict(dir + "/step-4/trainer.pt");
  ASSERT_TRUE(trainer.count("loss_scale")) << "trainer.pt holds no loss_scale";
  EXPECT_EQ(trainer["loss_scale"].item<double>(), kHugeScale / 2);
  EXPECT_EQ(trainer["loss_scale_good_steps"].item<int64_t>(), 1);  // step 4, after the overflow

  auto resumed_env = env;
  resumed_env["MITRA_RESUME_STEP"] = "4";
  auto resumed = testing::RunJob(OverflowTrain(), 1, 1,
                                 {"--bad", "16", "--loss-scale", std::to_string(kHugeScale),
                                  "--steps", "5"},
                                 resumed_env);
  ASSERT_TRUE(resumed.ok()) << resumed.rank_output[0];
  ASSERT_FALSE(resumed.records.empty());
  double scale = -1;
  for (const auto& r : resumed.records) {
    if (r.GetString("event").value_or("") == "step") scale = r.GetNumber("loss_scale").value_or(-1);
  }
  EXPECT_EQ(scale, kHugeScale / 2) << resumed.rank_output[0];
  std::filesystem::remove_all(dir);

  // Written without a loss scale (fp32): resumed with one, it starts at the initial scale.
  const std::string plain = testing::MakeTempDir("mitra-ovf-ck");
  const std::map<std::string, std::string> plain_env{{"MITRA_CHECKPOINT_DIR", plain}};
  ASSERT_TRUE(testing::RunJob(OverflowTrain(), 1, 1, {"--steps", "2"}, plain_env).ok());
  EXPECT_FALSE(testing::LoadTensorDict(plain + "/step-2/trainer.pt").count("loss_scale"));
  auto scaled_env = plain_env;
  scaled_env["MITRA_RESUME_STEP"] = "2";
  auto scaled = testing::RunJob(OverflowTrain(), 1, 1, {"--loss-scale", "1024", "--steps", "3"},
                                scaled_env);
  ASSERT_TRUE(scaled.ok()) << scaled.rank_output[0];
  double resumed_scale = -1;
  for (const auto& r : scaled.records) {
    if (r.GetString("event").value_or("") == "step") resumed_scale = r.GetNumber("loss_scale").value_or(-1);
  }
  EXPECT_EQ(resumed_scale, 1024);
  std::filesystem::remove_all(plain);
}

// What the CPU build cannot do is refused before anything runs: exit 2 and what to do.
TEST(Precision, ThisBuildRefusesFp16CudaAndNcclWithExitCodeTwo) {
  struct Case {
    std::vector<std::string> args;
    std::map<std::string, std::string> env;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--precision", "fp8"}, {}, "--precision: unknown precision 'fp8' (expected fp32, bf16 or"},
      {{"--precision", "fp16"}, {}, "use --precision bf16 on the CPU"},
      {{"--backend", "nccl"}, {}, "scripts/gpu-build"},
      {{}, {{"MITRA_DEVICE", "cuda"}}, "scripts/gpu-build"},
      {{}, {{"MITRA_PRECISION", "fp8"}}, "MITRA_PRECISION 'fp8' is not a precision"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args{"--model", "tiny", "--steps", "1"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    auto run = testing::RunJob(MITRA_GPT_TRAIN, 1, 1, args, c.env);
    ASSERT_EQ(run.exit_codes, std::vector<int>{2}) << run.rank_output[0];
    EXPECT_NE(run.rank_output[0].find(c.says), std::string::npos) << run.rank_output[0];
  }
}

}  // namespace
}  // namespace mitra
