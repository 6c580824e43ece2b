// Models beyond the GPT example, end to end: the image classifier (BatchNorm, dropout) and the
// GPT with dropout, trained by the real `mitra run` or as real worker processes.
//
// What must hold: buffers are model state (saved, restored in any shape, equal on every
// replica after every step, updated once under recomputation); random choices and the micro-
// batches do not depend on the shape; evaluation gives the same metrics in every shape and a
// checkpoint loaded into one process gives the same; each optimizer's state survives a shape
// change; work after training is not a hang.
//
// Tolerances. Shapes reorder fp32 sums (see fidelity_test.cc): losses agree to ~1e-6 relative,
// we allow 2e-5 on losses ~2.3. The replicas' running statistics are merged in float64 from
// each replica's float32 values (worker/step/buffer_sync.h), and parameters move by lr * O(1) per
// step (SGD with momentum, lr 0.01, or Adam's normalised steps) from gradients that agree to
// ~1e-6 relative: we allow 2e-5 absolute for parameters and buffers (values of O(1)), far below
// what a lost micro-batch, a skipped merge or a doubled buffer update moves them (>= 1e-3).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "examples/fashion/classifier_model.h"
#include "examples/fashion/fashion_data.h"
#include "mitra/worker/inference.h"
#include "tests/common/run_helpers.h"
#include "tests/worker/gpt_helpers.h"
#include "tests/worker/job_runner.h"

namespace mitra {
namespace {

using testing::MitraRun;
using testing::RunOutcome;
using testing::TempDir;

constexpr double kLossTolerance = 2e-5;
constexpr double kStateTolerance = 2e-5;
constexpr int64_t kTestSamples = 128;

// The classifier's arguments (small: 4 channels, 512 training images), plus `extra`.
std::vector<std::string> ClassifierArgs(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args{"--width", "4", "--train-samples", "512", "--test-samples",
                                std::to_string(kTestSamples), "--seed", "5", "--lr", "0.01",
                                "--warmup", "0", "--cosine-steps", "0"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// The same as a command line: the program first.
std::vector<std::string> Classifier(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> command{MITRA_FASHION_TRAIN};
  for (const std::string& a : ClassifierArgs(extra)) command.push_back(a);
  return command;
}

examples::ClassifierConfig ClassifierConfig() { return {4, 0}; }

// Every tensor of the dumps in `dir` (stage-<s>.pt), by name.
std::map<std::string, torch::Tensor> Dumped(const std::string& dir) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    for (auto& [name, t] : testing::LoadTensorDict(entry.path().string())) out[name] = t;
  }
  return out;
}

bool IsBuffer(const std::string& name) {
  return name.find("running_") != std::string::npos ||
         name.find("num_batches_tracked") != std::string::npos;
}

// Every tensor of `got` equals `expected`'s within `tolerance` (0: bitwise), and `got` holds
// exactly the same names.
void ExpectSameTensors(const std::map<std::string, torch::Tensor>& got,
                       const std::map<std::string, torch::Tensor>& expected, double tolerance,
                       const std::string& what) {
  ASSERT_EQ(got.size(), expected.size()) << what;
  for (const auto& [name, t] : expected) {
    ASSERT_TRUE(got.count(name)) << name << " missing in " << what;
    const torch::Tensor& g = got.at(name);
    if (tolerance == 0) {
      EXPECT_TRUE(torch::equal(g, t)) << name << " in " << what;
    } else {
      EXPECT_LE((g.to(torch::kFloat64) - t.to(torch::kFloat64)).abs().max().item<double>(),
                tolerance)
          << name << " in " << what;
    }
  }
}

std::vector<JsonObject> Named(const std::vector<JsonObject>& records, const std::string& event) {
  std::vector<JsonObject> out;
  for (const auto& r : records) {
    if (r.GetString("event") == event) out.push_back(r);
  }
  return out;
}

// ---- Buffers -------------------------------------------------------------------------------

TEST(ModelState, ASameShapeResumeGivesBitwiseTheUninterruptedBuffersAndParameters) {
  TempDir tmp;
  const std::string whole = tmp.Path("whole"), resumed = tmp.Path("resumed");
  RunOutcome reference =
      MitraRun(tmp, tmp.Path("run-a"), 2, 1, 6, {}, Classifier({"--dump-params", whole}));
  ASSERT_EQ(reference.result.exit_code, 0) << reference.result.output();
  RunOutcome first = MitraRun(tmp, tmp.Path("run-b"), 2, 1, 4, {}, Classifier());
  ASSERT_EQ(first.result.exit_code, 0) << first.result.output();
  RunOutcome second =
      MitraRun(tmp, tmp.Path("run-b"), 2, 1, 6, {}, Classifier({"--dump-params", resumed}));
  ASSERT_EQ(second.result.exit_code, 0) << second.result.output();
  const auto got = Dumped(resumed);
  EXPECT_EQ(got.at("block1.bn1.num_batches_tracked").item<int64_t>(), 6 * 4);
  ExpectSameTensors(got, Dumped(whole), 0, "the resumed 1 x 2 job");
}

TEST(ModelState, ReplicasHoldEqualBuffersAfterEveryStep) {
  for (int steps : {1, 3}) {
    const std::string dump = testing::MakeTempDir("mitra-replicas");
    auto run = testing::RunJob(MITRA_FASHION_TRAIN, 2, 2,
                               ClassifierArgs({"--steps", std::to_string(steps), "--batch-size", "16",
                                           "--chunk-size", "4", "--dump-params", dump,
                                           "--dump-replica", "-1"}));
    ASSERT_TRUE(run.ok()) << run.rank_output.back();
    for (int stage = 0; stage < 2; ++stage) {
      const std::string prefix = dump + "/stage-" + std::to_string(stage);
      auto r0 = testing::LoadTensorDict(prefix + ".replica-0.pt");
      auto r1 = testing::LoadTensorDict(prefix + ".replica-1.pt");
      std::map<std::string, torch::Tensor> b0, b1;
      for (auto& [name, t] : r0) {
        if (IsBuffer(name)) b0[name] = t;
      }
      for (auto& [name, t] : r1) {
        if (IsBuffer(name)) b1[name] = t;
      }
      ASSERT_FALSE(b0.empty());
      ExpectSameTensors(b1, b0, 0, "replica 1 of stage " + std::to_string(stage) + " after " +
                                       std::to_string(steps) + " steps");
    }
    std::filesystem::remove_all(dump);
  }
}

TEST(ModelState, RecomputationUpdatesEveryBufferOnce) {
  std::map<std::string, std::map<std::string, torch::Tensor>> buffers;  // schedule -> dump
  for (const std::vector<std::string>& schedule :
       {std::vector<std::string>{"--schedule", "1f1b"},
        {"--schedule", "1f1b", "--recompute"},
        {"--schedule", "varuna"},
        {"--schedule", "gpipe", "--recompute"},
        {"--schedule", "zb-h1", "--recompute"},
        {"--schedule", "interleaved", "--recompute"},
        {"--schedule", "zb-v", "--recompute"}}) {
    const std::string dump = testing::MakeTempDir("mitra-recompute");
    auto args = ClassifierArgs({"--steps", "2", "--batch-size", "16", "--chunk-size", "4",
                            "--dump-params", dump, "--dropout", "0.3"});
    args.insert(args.end(), schedule.begin(), schedule.end());
    auto run = testing::RunJob(MITRA_FASHION_TRAIN, 2, 1, args);
    ASSERT_TRUE(run.ok()) << run.rank_output.back();
    std::string name;
    for (const auto& a : schedule) name += a + " ";
    for (auto& [tensor, t] : Dumped(dump)) {
      if (IsBuffer(tensor)) buffers[name][tensor] = t;
    }
    std::filesystem::remove_all(dump);
  }
  const auto& plain = buffers.at("--schedule 1f1b ");
  EXPECT_EQ(plain.at("stem.bn.num_batches_tracked").item<int64_t>(), 2 * 4);
  for (const auto& [schedule, got] : buffers) ExpectSameTensors(got, plain, 0, schedule);
}

// ---- Randomness and micro-batches that do not depend on the shape ---------------------------

struct Shape {
  int stages, replicas;
  std::vector<std::string> extra;
};

// Runs `args` in every shape and expects rank 0's losses of the first to agree with all others.
void ExpectSameLossesInEveryShape(const std::string& program, const std::vector<std::string>& args,
                                  const std::vector<Shape>& shapes) {
  std::vector<double> reference;
  for (const Shape& shape : shapes) {
    auto all = args;
    all.insert(all.end(), shape.extra.begin(), shape.extra.end());
    auto run = testing::RunJob(program, shape.stages, shape.replicas, all);
    ASSERT_TRUE(run.ok()) << run.rank_output.back();
    ASSERT_EQ(run.losses.size(), 4u) << run.rank_output[0];
    if (reference.empty()) {
      reference = run.losses;
      continue;
    }
    for (size_t k = 0; k < reference.size(); ++k) {
      EXPECT_NEAR(run.losses[k], reference[k], kLossTolerance)
          << shape.stages << "x" << shape.replicas << " step " << k + 1;
    }
  }
}

const std::vector<Shape> kShapes = {{1, 1, {}}, {2, 1, {}}, {1, 2, {}}, {2, 2, {}},
                                    {2, 2, {"--schedule", "varuna"}},
                                    {2, 2, {"--schedule", "zb-h1"}},
                                    {2, 1, {"--schedule", "zb-h1", "--recompute"}},
                                    {2, 2, {"--schedule", "interleaved"}},
                                    {2, 1, {"--schedule", "zb-v", "--recompute"}}};

TEST(Randomness, AGptWithDropoutTrainsTheSameInEveryShape) {
  ExpectSameLossesInEveryShape(
      MITRA_GPT_TRAIN,
      {"--model", "tiny", "--dropout", "0.2", "--seed", "9", "--steps", "4", "--batch-size", "16",
       "--chunk-size", "4", "--lr", "1e-3"},
      kShapes);
}

TEST(Randomness, AClassifierWithBatchNormAndDropoutTrainsTheSameInEveryShape) {
  ExpectSameLossesInEveryShape(
      MITRA_FASHION_TRAIN,
      ClassifierArgs({"--dropout", "0.3", "--steps", "4", "--batch-size", "16", "--chunk-size", "4"}),
      kShapes);
}

TEST(Randomness, DropoutChangesTheLossesOnlyWhenAsked) {
  // Guards the test above: with dropout the losses differ from those without it.
  auto with = testing::RunJob(MITRA_GPT_TRAIN, 1, 2,
                              {"--model", "tiny", "--dropout", "0.2", "--steps", "1"});
  auto without = testing::RunJob(MITRA_GPT_TRAIN, 1, 2, {"--model", "tiny", "--steps", "1"});
  ASSERT_TRUE(with.ok() && without.ok());
  EXPECT_GT(std::abs(with.losses.at(0) - without.losses.at(0)), 1e-4);
}

TEST(ChunkSize, IsKeptAcrossAResumeAndAChangeIsWarnedAbout) {
  TempDir tmp;
  const std::string run_dir = tmp.Path("run");
  auto run = [&](int slots, int64_t steps, const std::vector<std::string>& flags) {
    const std::string machines = tmp.Write("machines-" + std::to_string(slots) + ".txt",
                                           "localhost slots=" + std::to_string(slots) + "\n");
    std::vector<std::string> args{"run", "--machines", machines, "--batch-size", "16",
                                  "--nstages", "1", "--max-steps", std::to_string(steps),
                                  "--run-dir", run_dir};
    args.insert(args.end(), flags.begin(), flags.end());
    args.push_back("--");
    for (const auto& a : Classifier()) args.push_back(a);
    return testing::RunProgram(MITRA_BINARY, args, tmp.path(), 180);
  };
  // 2 slots: the default kept for the job gives each replica 4 micro-batches of 2.
  auto first = run(2, 2, {});
  ASSERT_EQ(first.exit_code, 0) << first.output();
  EXPECT_NE(first.out.find("micro-batches of 2 (kept for the job"), std::string::npos)
      << first.out;
  // 1 slot: the checkpoint's micro-batch, not the 1-slot default (4).
  auto second = run(1, 3, {});
  ASSERT_EQ(second.exit_code, 0) << second.output();
  const auto launches = testing::EventsNamed(run_dir, "launch");
  ASSERT_EQ(launches.size(), 2u);
  EXPECT_EQ(launches[0].GetNumber("chunk_size"), 2);
  EXPECT_EQ(launches[1].GetNumber("chunk_size"), 2);
  EXPECT_EQ(launches[1].GetNumber("replicas"), 1);
  // An explicit other one is taken, and said to change the training.
  auto third = run(1, 4, {"--chunk-size", "4"});
  ASSERT_EQ(third.exit_code, 0) << third.output();
  EXPECT_NE(third.err.find("was written with --chunk-size 2 and this run uses 4"),
            std::string::npos)
      << third.err;
  EXPECT_NE(third.err.find("chunk_size 2 -> 4"), std::string::npos) << third.err;
}

TEST(ChunkSize, AMicroBatchIndependentModelTakesEachShapesOwnDefault) {
  TempDir tmp;
  const std::string run_dir = tmp.Path("run");
  for (int slots : {1, 2}) {
    const std::string machines = tmp.Write("machines-" + std::to_string(slots) + ".txt",
                                           "localhost slots=" + std::to_string(slots) + "\n");
    std::vector<std::string> args{"run", "--machines", machines, "--batch-size", "16",
                                  "--nstages", "1", "--max-steps", std::to_string(slots),
                                  "--run-dir", run_dir, "--"};
    for (const auto& a : testing::GptArgs()) args.push_back(a);
    auto r = testing::RunProgram(MITRA_BINARY, args, tmp.path(), 180);
    ASSERT_EQ(r.exit_code, 0) << r.output();
  }
  const auto launches = testing::EventsNamed(run_dir, "launch");
  ASSERT_EQ(launches.size(), 2u);
  EXPECT_EQ(launches[0].GetNumber("chunk_size"), 16);  // one micro-batch per replica
  EXPECT_EQ(launches[1].GetNumber("chunk_size"), 8);
}

// ---- Evaluation and inference --------------------------------------------------------------

TEST(Evaluation, GivesTheSameMetricsInEveryShape) {
  std::optional<JsonObject> reference;
  for (const Shape& shape : kShapes) {
    auto args = ClassifierArgs({"--steps", "2", "--batch-size", "16", "--chunk-size", "4"});
    args.insert(args.end(), shape.extra.begin(), shape.extra.end());
    auto run = testing::RunJob(MITRA_FASHION_TRAIN, shape.stages, shape.replicas, args);
    ASSERT_TRUE(run.ok()) << run.rank_output.back();
    const auto evals = Named(run.records, "eval");
    ASSERT_EQ(evals.size(), 1u) << run.rank_output[0];
    EXPECT_EQ(evals[0].GetNumber("samples"), kTestSamples);
    if (!reference) {
      reference = evals[0];
      EXPECT_GT(*reference->GetNumber("accuracy"), 0.0);
      continue;
    }
    EXPECT_NEAR(*evals[0].GetNumber("loss"), *reference->GetNumber("loss"), kLossTolerance);
    EXPECT_EQ(evals[0].GetNumber("accuracy"), reference->GetNumber("accuracy"))
        << shape.stages << "x" << shape.replicas;
  }
}

TEST(Inference, ACheckpointWrittenIn2x2EqualsTheTrainingModelsEvaluation) {
  TempDir tmp;
  const std::string run_dir = tmp.Path("run");
  RunOutcome run = MitraRun(tmp, run_dir, 4, 2, 3, {}, Classifier());
  ASSERT_EQ(run.result.exit_code, 0) << run.result.output();
  std::optional<JsonObject> eval;
  for (const JsonObject& m : run.metrics) {
    if (m.Has("eval_loss")) eval = m;
  }
  ASSERT_TRUE(eval) << "no evaluation in metrics.jsonl";
  EXPECT_NE(run.result.out.find("eval after step 3: loss "), std::string::npos) << run.result.out;

  const cutpoint::ModelSpec spec = examples::MakeClassifierSpec(ClassifierConfig());
  auto test = *examples::FashionMnist::Open(examples::kFashionMnistDir, "test", kTestSamples);
  auto from_dir = worker::InferenceModel::Load(spec, run_dir + "/checkpoints");
  ASSERT_TRUE(from_dir.ok()) << from_dir.status().message();
  EXPECT_EQ((*from_dir)->step(), 3);
  const worker::EvalResult result =
      (*from_dir)->Evaluate(*test, {{"accuracy", examples::CorrectPredictions()}});
  EXPECT_NEAR(result.loss, *eval->GetNumber("eval_loss"), kLossTolerance);
  EXPECT_EQ(result.metrics.at(0).second, *eval->GetNumber("eval_accuracy"));

  // The exported file holds the same model, buffers included.
  const std::string exported = tmp.Path("model.pt");
  auto export_run = testing::RunProgram(
      MITRA_BINARY, {"checkpoint", "export", run_dir + "/checkpoints", exported}, tmp.path());
  ASSERT_EQ(export_run.exit_code, 0) << export_run.output();
  auto from_file = worker::InferenceModel::Load(spec, exported);
  ASSERT_TRUE(from_file.ok()) << from_file.status().message();
  const cutpoint::Activations batch = worker::Collate(*test, {0, 1, 2, 3, 4});
  EXPECT_TRUE(torch::equal((*from_file)->Forward(batch).at("logits"),
                           (*from_dir)->Forward(batch).at("logits")));

  // Another model's checkpoint is refused, naming the difference.
  auto wider = worker::InferenceModel::Load(examples::MakeClassifierSpec({8, 0}), exported);
  ASSERT_FALSE(wider.ok());
  EXPECT_NE(wider.status().message().find("exported from another model"), std::string::npos)
      << wider.status().message();
}

// ---- Optimizers ----------------------------------------------------------------------------

class OptimizerContinuation : public ::testing::TestWithParam<std::vector<std::string>> {};

// 2 x 2 for 4 steps, then 1 x 3 for 2 more, against 1 x 1 for 6: losses, parameters, buffers.
TEST_P(OptimizerContinuation, StateAndBuffersSurviveAShapeChange) {
  TempDir tmp;
  const std::string whole = tmp.Path("whole"), resumed = tmp.Path("resumed");
  auto args = [&](const std::vector<std::string>& extra) {
    auto a = GetParam();
    a.insert(a.end(), extra.begin(), extra.end());
    return Classifier(a);
  };
  RunOutcome reference = MitraRun(tmp, tmp.Path("ref"), 1, 1, 6, {}, args({"--dump-params", whole}));
  ASSERT_EQ(reference.result.exit_code, 0) << reference.result.output();
  RunOutcome a = MitraRun(tmp, tmp.Path("run"), 4, 2, 4, {}, args({}));
  ASSERT_EQ(a.result.exit_code, 0) << a.result.output();
  RunOutcome b = MitraRun(tmp, tmp.Path("run"), 3, 1, 6, {}, args({"--dump-params", resumed}));
  ASSERT_EQ(b.result.exit_code, 0) << b.result.output();
  EXPECT_EQ(b.result.err.find("warning"), std::string::npos) << b.result.err;
  const auto expected = testing::Losses(reference.metrics), got = testing::Losses(b.metrics);
  ASSERT_EQ(got.size(), 6u);
  for (size_t k = 0; k < 6; ++k) EXPECT_NEAR(got[k], expected[k], kLossTolerance) << k + 1;
  ExpectSameTensors(Dumped(resumed), Dumped(whole), kStateTolerance, "the resumed 1 x 3 job");
}

INSTANTIATE_TEST_SUITE_P(
    Optimizers, OptimizerContinuation,
    ::testing::Values(std::vector<std::string>{"--optimizer", "sgd", "--nesterov"},
                      std::vector<std::string>{"--optimizer", "adam"},
                      std::vector<std::string>{"--optimizer", "adamw"},
                      std::vector<std::string>{"--optimizer", "lion", "--lr", "1e-3"}),
    [](const ::testing::TestParamInfo<std::vector<std::string>>& info) {
      return info.param[1];
    });

// ---- After training ------------------------------------------------------------------------

TEST(AfterTraining, WorkLongerThanTheHeartbeatTimeoutIsNotAHang) {
  TempDir tmp;
  const std::string run_dir = tmp.Path("run");
  // After training, rank 0 evaluates the whole test set in one process (--test-after): about
  // 2 s at width 32 on 8000 samples here, which a fast run took to 1.97 s, so width 48 on all
  // 10,000, well past the 2 s timeout.
  std::vector<std::string> program{MITRA_FASHION_TRAIN, "--width", "48", "--train-samples",
                                   "256", "--test-samples", "10000", "--test-after"};
  RunOutcome run = MitraRun(tmp, run_dir, 1, 1, 2, {"--heartbeat-timeout", "2"}, program);
  ASSERT_EQ(run.result.exit_code, 0) << run.result.output();
  EXPECT_EQ(testing::EventsNamed(run_dir, "launch").size(), 1u);
  EXPECT_TRUE(testing::EventsNamed(run_dir, "failure").empty());
  std::ifstream log(run_dir + "/logs/gen-0/rank-0.log");
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      text, m, std::regex("test after training: step 2, .* on 10000 samples \\(([0-9.]+) s\\)")))
      << text;
  // The test means something only if the work outlasted the heartbeat timeout.
  EXPECT_GT(std::stod(m[1]), 2.0) << "the work after training was too short to test this";
}

}  // namespace
}  // namespace mitra
