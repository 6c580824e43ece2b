// Unit tests of the worker's pure parts: samplers, LR schedule, stages, optimizers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>

#include "examples/fashion/classifier_model.h"
#include "examples/gpt/gpt_model.h"
#include "mitra/planner/batch_split.h"
#include "mitra/worker/data.h"
#include "mitra/worker/lr_schedule.h"
#include "mitra/worker/optimizer.h"
#include "mitra/worker/stage.h"
#include "worker/heartbeat.h"
#include "worker/state/checkpointer.h"
#include "worker/step/kernel_trace.h"

namespace mitra::worker {
namespace {

// The dataset indices at positions [step B + offset, + count) of a sampler's stream.
std::vector<int64_t> Indices(Sampler& sampler, int64_t batch, int64_t step, int64_t offset,
                             int64_t count) {
  std::vector<int64_t> out;
  for (int64_t j = 0; j < count; ++j) out.push_back(sampler.IndexAt(step * batch + offset + j));
  return out;
}

std::unique_ptr<Sampler> Shuffled(int64_t size, uint64_t seed) {
  return MakeSamplerFactory(SamplerKind::kShuffled)(size, seed);
}

TEST(Sampler, OrderIsAPureFunctionOfSeedAndStep) {
  auto a = Shuffled(1000, 7), b = Shuffled(1000, 7), c = Shuffled(1000, 8);
  EXPECT_EQ(Indices(*a, 32, 5, 0, 32), Indices(*b, 32, 5, 0, 32));
  EXPECT_NE(Indices(*a, 32, 5, 0, 32), Indices(*c, 32, 5, 0, 32));
  // Asking out of order gives the same answers.
  auto late = Indices(*b, 32, 40, 0, 32);
  Indices(*b, 32, 0, 0, 32);
  EXPECT_EQ(Indices(*b, 32, 40, 0, 32), late);
}

TEST(Sampler, ReplicaSharesTileTheGlobalBatchForAnyReplicaCount) {
  auto sampler = Shuffled(500, 3);
  const auto whole = Indices(*sampler, 30, 2, 0, 30);
  for (int64_t chunk : {1, 4, 7, 30}) {
    for (int replicas = 1; replicas <= planner::NumMicroBatches(30, chunk); ++replicas) {
      std::vector<int64_t> joined;
      for (int d = 0; d < replicas; ++d) {
        auto share = planner::ShareOf(30, chunk, replicas, d);
        auto part = Indices(*sampler, 30, 2, share.offset, share.samples);
        joined.insert(joined.end(), part.begin(), part.end());
      }
      EXPECT_EQ(joined, whole) << replicas << " replicas, chunk " << chunk;
    }
  }
}

TEST(Sampler, EachEpochVisitsEverySampleOnce) {
  auto sampler = Shuffled(100, 1);
  std::vector<int64_t> epoch;
  for (int step = 0; step < 10; ++step) {
    auto part = Indices(*sampler, 10, step, 0, 10);
    epoch.insert(epoch.end(), part.begin(), part.end());
  }
  std::sort(epoch.begin(), epoch.end());
  for (int64_t i = 0; i < 100; ++i) EXPECT_EQ(epoch[i], i);
  // The next epoch is another permutation.
  EXPECT_NE(Indices(*sampler, 10, 10, 0, 10), Indices(*sampler, 10, 0, 0, 10));
}

TEST(Sampler, BatchesStraddleEpochBoundaries) {
  auto sampler = Shuffled(25, 1);  // step 2 takes positions 20..29: 5 from epoch 0, 5 from 1
  auto straddle = Indices(*sampler, 10, 2, 0, 10);
  std::set<int64_t> first(straddle.begin(), straddle.begin() + 5);
  EXPECT_EQ(first.size(), 5u);
}

TEST(Sampler, SequentialWrapsAroundAndUnknownNamesAreRefused) {
  auto sequential = MakeSamplerFactory(*ParseSamplerKind("sequential"))(7, 1);
  EXPECT_EQ(Indices(*sequential, 5, 1, 0, 5), (std::vector<int64_t>{5, 6, 0, 1, 2}));
  EXPECT_EQ(SamplerKindName(*ParseSamplerKind("shuffled")), std::string("shuffled"));
  auto unknown = ParseSamplerKind("random");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("shuffled or sequential"), std::string::npos);
}

TEST(LrSchedule, WarmsUpLinearlyThenDecaysToTheFloor) {
  LrSchedule lr{1.0, 10, 110, 0.1};
  EXPECT_DOUBLE_EQ(lr.At(0), 0.1);
  EXPECT_DOUBLE_EQ(lr.At(9), 1.0);
  EXPECT_DOUBLE_EQ(lr.At(10), 1.0);
  EXPECT_NEAR(lr.At(60), 0.55, 1e-12);
  EXPECT_NEAR(lr.At(110), 0.1, 1e-12);
  EXPECT_NEAR(lr.At(500), 0.1, 1e-12);
  EXPECT_DOUBLE_EQ((LrSchedule{0.5, 0, 0, 0.1}.At(1000)), 0.5);
}

TEST(Stage, HoldsOnlyItsOwnSegmentsParameters) {
  auto config = *examples::GptConfig::Named("tiny");  // embed, block0, block1, head
  auto spec = examples::MakeGptSpec(config);
  std::vector<int> built(spec.num_segments(), 0);
  for (int i = 0; i < spec.num_segments(); ++i) {
    auto inner = spec.segments[i].factory;
    spec.segments[i].factory = [inner, &built, i] {
      ++built[i];
      return inner();
    };
  }
  const auto per_segment = cutpoint::CountSegmentParameters(spec);
  std::fill(built.begin(), built.end(), 0);

  auto partition = *cutpoint::MakePartition("1,2,1", spec.num_segments(), 3);
  Stage middle(spec, partition, 1, 1234);
  EXPECT_EQ(built, (std::vector<int>{0, 1, 1, 0})) << "a stage built another stage's segment";
  EXPECT_EQ(middle.ParameterCount(), per_segment[1] + per_segment[2]);
  for (const auto& p : middle.parameters()) {
    EXPECT_TRUE(p.name.rfind("block0.", 0) == 0 || p.name.rfind("block1.", 0) == 0) << p.name;
  }
  int64_t total = 0;
  for (int s = 0; s < 3; ++s) total += Stage(spec, partition, s, 1234).ParameterCount();
  int64_t expected = 0;
  for (int64_t n : per_segment) expected += n;
  EXPECT_EQ(total, expected);
}

TEST(Stage, SegmentWeightsDoNotDependOnWhichStageBuildsThem) {
  auto spec = examples::MakeGptSpec(*examples::GptConfig::Named("tiny"));
  Stage alone(spec, *cutpoint::MakePartition("4", 4, 1), 0, 99);
  Stage split(spec, *cutpoint::MakePartition("2,2", 4, 2), 1, 99);
  for (const auto& p : split.parameters()) {
    EXPECT_TRUE(torch::equal(p.tensor, alone.Find(p.name))) << p.name;
  }
}

TEST(StepTimes, AHeartbeatTakesTheStepsSinceThePreviousOne) {
  StepTimes times;
  EXPECT_EQ(times.Take().steps, 0);
  times.Add(7, 0.25, 0.05);
  times.Add(8, 0.75, 0.15);
  const StepTimes::Window w = times.Take();
  EXPECT_EQ(w.steps, 2);
  EXPECT_EQ(w.last_step, 8);
  EXPECT_DOUBLE_EQ(w.compute_s, 1.0);  // sums: the heartbeat divides by steps
  EXPECT_DOUBLE_EQ(w.wait_s, 0.2);
  EXPECT_EQ(times.Take().steps, 0);  // taken: the next window starts empty
  times.Add(9, 0.5, 0.0);
  EXPECT_EQ(times.Take().last_step, 9);
}

TEST(LrSchedule, DescribesItself) {
  EXPECT_EQ((LrSchedule{3e-4, 0, 0, 0.1}.Describe()), "lr 0.0003 constant");
  EXPECT_EQ((LrSchedule{0.1, 10, 100, 0.1}.Describe()), "lr 0.1, warm-up 10 steps, cosine to 0.01 at step 100");
  EXPECT_EQ((LrSchedule{0.1, 10, 0, 0.1}.Describe()), "lr 0.1, warm-up 10 steps, then constant");
}

TEST(Stage, HoldsItsSegmentsBuffersUnderQualifiedNames) {
  auto spec = examples::MakeClassifierSpec({4, 0});
  Stage stage(spec, *cutpoint::MakePartition("2,2", 4, 2), 0, 1);
  std::set<std::string> names;
  for (const auto& b : stage.buffers()) names.insert(b.name);
  EXPECT_TRUE(names.count("stem.bn.running_mean"));
  EXPECT_TRUE(names.count("block1.bn_shortcut.num_batches_tracked"));
  EXPECT_FALSE(names.count("block2.bn1.running_var")) << "a buffer of another stage";
  auto copies = stage.CopyBuffers();
  torch::NoGradGuard no_grad;
  stage.buffers()[0].tensor.add_(1);
  stage.RestoreBuffers(copies);
  EXPECT_TRUE(torch::equal(stage.buffers()[0].tensor, copies[0]));
}

TEST(Stage, RandomNumbersFollowTheForwardKeyAndLeaveTheProgramsGeneratorAlone) {
  auto config = *examples::GptConfig::Named("tiny");
  config.dropout = 0.5;
  auto spec = examples::MakeGptSpec(config);
  Stage stage(spec, *cutpoint::MakePartition("4", 4, 1), 0, 7);
  const cutpoint::Activations batch{{"tokens", torch::randint(0, 256, {2, 32}, torch::kInt64)}};
  torch::manual_seed(99);
  const torch::Tensor a = stage.Forward(batch, {3, 1}).at("logits");
  const torch::Tensor after_forward = torch::rand({4});
  torch::manual_seed(99);
  const torch::Tensor untouched = torch::rand({4});
  EXPECT_TRUE(torch::equal(after_forward, untouched)) << "the forward moved the program's generator";
  EXPECT_TRUE(torch::equal(stage.Forward(batch, {3, 1}).at("logits"), a));
  EXPECT_FALSE(torch::equal(stage.Forward(batch, {3, 2}).at("logits"), a));
  EXPECT_FALSE(torch::equal(stage.Forward(batch, {4, 1}).at("logits"), a));
  stage.SetTraining(false);  // no dropout: the key no longer matters
  EXPECT_TRUE(torch::equal(stage.Forward(batch, {3, 1}).at("logits"),
                           stage.Forward(batch, {4, 2}).at("logits")));
}

TEST(MicroBatchIndependence, IsRefusedForAModelWithBatchNormNamingTheModule) {
  auto spec = examples::MakeClassifierSpec({4, 0});
  EXPECT_TRUE(DescribeModel(spec).independence.ok());
  spec.micro_batch_independent = true;
  const ModelDescription d = DescribeModel(spec);
  ASSERT_FALSE(d.independence.ok());
  EXPECT_NE(d.independence.message().find("segment 'stem' holds bn (BatchNorm2d)"),
            std::string::npos)
      << d.independence.message();
  EXPECT_NE(d.independence.message().find("remove the declaration"), std::string::npos);
  EXPECT_NE(d.buffers.find("stem.bn.running_mean[4]"), std::string::npos) << d.buffers;
  EXPECT_TRUE(DescribeModel(examples::MakeGptSpec(*examples::GptConfig::Named("tiny")))
                  .independence.ok());
}

// Dropout draws a micro-batch's masks at once: a model that declares itself micro-batch
// independent and draws random numbers in training is refused at its first training forward,
// naming the segment and the fix. Evaluation (no dropout) and a model without draws pass.
TEST(MicroBatchIndependence, IsRefusedForAModelThatDrawsRandomNumbersNamingTheSegment) {
  auto config = *examples::GptConfig::Named("tiny");
  const cutpoint::Activations batch{{"tokens", torch::randint(0, 256, {2, 32}, torch::kInt64)}};
  EXPECT_TRUE(examples::MakeGptSpec(config).micro_batch_independent);
  config.dropout = 0.1;
  auto spec = examples::MakeGptSpec(config);
  EXPECT_FALSE(spec.micro_batch_independent) << "the example declares what it is";
  spec.micro_batch_independent = true;  // as a program might, wrongly
  Stage stage(spec, *cutpoint::MakePartition("2,2", 4, 2), 0, 7);
  try {
    stage.Forward(batch, {0, 0});
    ADD_FAILURE() << "a declared independent model with dropout trained";
  } catch (const MicroBatchDependence& e) {
    EXPECT_NE(std::string(e.what()).find("segment '" + spec.segments[1].name + "' draws random"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("remove the declaration"), std::string::npos);
  }
  stage.SetTraining(false);
  EXPECT_NO_THROW(stage.Forward(batch, {0, 0}));
  config.dropout = 0;
  Stage plain(examples::MakeGptSpec(config), *cutpoint::MakePartition("2,2", 4, 2), 0, 7);
  EXPECT_NO_THROW(plain.Forward(batch, {0, 0}));
}

// Two steps of `options` on fresh parameters, given the same gradients each time.
std::vector<torch::Tensor> Params() {
  torch::manual_seed(3);
  return {torch::randn({4, 3}).requires_grad_(), torch::randn({5}).requires_grad_()};
}

void SetGrads(const std::vector<torch::Tensor>& params, int step) {
  torch::manual_seed(100 + step);
  for (const auto& p : params) p.mutable_grad() = torch::randn(p.sizes());
}

TEST(Optimizer, StateCarriedByNameContinuesExactlyInAFreshOptimizer) {
  std::vector<OptimizerOptions> all(4);
  all[0].name = "sgd";
  all[0].momentum = 0.9;
  all[1].name = "sgd";
  all[1].momentum = 0.9;
  all[1].nesterov = true;
  all[2].name = "adam";
  all[3].name = "adamw";
  for (const OptimizerOptions& o : all) {
    auto a_params = Params();
    auto a = std::move(MakeOptimizer(o, a_params)).value();
    for (int step = 0; step < 2; ++step) {
      SetGrads(a_params, step);
      a->Step(0.01);
    }
    // A new optimizer over copies of the parameters, given the state by name.
    std::vector<torch::Tensor> b_params;
    for (const auto& p : a_params) b_params.push_back(p.detach().clone().requires_grad_());
    auto b = std::move(MakeOptimizer(o, b_params)).value();
    for (size_t i = 0; i < a_params.size(); ++i) {
      std::map<std::string, torch::Tensor> state;
      for (const auto& [name, t] : a->State(a_params[i])) state[name] = t.clone();
      ASSERT_FALSE(state.empty()) << a->Name();
      ASSERT_TRUE(b->SetState(b_params[i], state).ok()) << a->Name();
    }
    SetGrads(a_params, 2);
    SetGrads(b_params, 2);
    a->Step(0.01);
    b->Step(0.01);
    for (size_t i = 0; i < a_params.size(); ++i) {
      EXPECT_TRUE(torch::equal(a_params[i], b_params[i])) << a->Describe();
    }
    EXPECT_FALSE(b->SetState(b_params[0], {}).ok());
  }
}

// Adam and AdamW update every parameter at once (the _foreach_ operators); their arithmetic
// must be LibTorch's own, parameter by parameter. A parameter that goes without a gradient for
// a step falls behind in its update count, so its bias correction differs from the others'.
TEST(Optimizer, AdamAndAdamWUpdateAsLibTorchsOwnOptimizersDoBitForBit) {
  for (const auto& [name, weight_decay] :
       std::vector<std::pair<std::string, double>>{{"adam", 0.05}, {"adamw", 0.05}, {"adamw", 0}}) {
    OptimizerOptions o;
    o.name = name;
    o.weight_decay = weight_decay;
    auto ours_params = Params();
    std::vector<torch::Tensor> theirs_params;
    for (const auto& p : ours_params) theirs_params.push_back(p.detach().clone().requires_grad_());
    auto ours = std::move(MakeOptimizer(o, ours_params)).value();
    std::unique_ptr<torch::optim::Optimizer> theirs;
    if (o.name == "adam") {
      theirs = std::make_unique<torch::optim::Adam>(
          theirs_params, torch::optim::AdamOptions(0.01).weight_decay(o.weight_decay));
    } else {
      theirs = std::make_unique<torch::optim::AdamW>(
          theirs_params, torch::optim::AdamWOptions(0.01).weight_decay(o.weight_decay));
    }
    for (int step = 0; step < 5; ++step) {
      SetGrads(ours_params, step);
      SetGrads(theirs_params, step);
      if (step == 1) {  // the second parameter sits this step out
        ours_params[1].mutable_grad() = torch::Tensor();
        theirs_params[1].mutable_grad() = torch::Tensor();
      }
      ours->Step(0.01);
      theirs->step();
      for (size_t i = 0; i < ours_params.size(); ++i) {
        EXPECT_TRUE(torch::equal(ours_params[i], theirs_params[i]))
            << name << " step " << step << " parameter " << i << ": largest difference "
            << (ours_params[i] - theirs_params[i]).abs().max().item<double>();
      }
    }
    EXPECT_EQ(ours->State(ours_params[0]).back().second.item<int64_t>(), 5);
    EXPECT_EQ(ours->State(ours_params[1]).back().second.item<int64_t>(), 4);
  }
}

TEST(Optimizer, BadSettingsAreRefusedWithTheFix) {
  OptimizerOptions o;
  o.name = "lamb";
  EXPECT_NE(MakeOptimizer(o, Params()).status().message().find("expected sgd, adam or adamw"),
            std::string::npos);
  o.name = "sgd";
  o.nesterov = true;
  EXPECT_NE(MakeOptimizer(o, Params()).status().message().find("needs momentum > 0"),
            std::string::npos);
  o.momentum = 0.9;
  EXPECT_EQ((*MakeOptimizer(o, Params()))->Describe(),
            "SGD (momentum 0.9; Nesterov; weight decay 0.01)");
}

// Where LibTorch has Kineto (a GPU machine's torch), the trace holds the operators run while it
// recorded; where it has not (Debian's CPU build), Start says so and nothing is recorded, so
// that the runtime can say why a traced step on a GPU has no kernel trace.
TEST(KernelTrace, RecordsWhatRanOrSaysWhyItCannot) {
  Result<std::unique_ptr<KernelTrace>> started = KernelTrace::Start();
  if (!started.ok()) {
    EXPECT_NE(started.status().message().find("LibTorch's profiler cannot record"),
              std::string::npos)
        << started.status().message();
    return;
  }
  (void)torch::mm(torch::ones({8, 8}), torch::ones({8, 8}));
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("mitra-kernel-trace-" + std::to_string(::getpid()) + ".json"))
                               .string();
  const Status written = started.value()->Write(path);
  ASSERT_TRUE(written.ok()) << written.message();
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::filesystem::remove(path);
  EXPECT_NE(text.find("aten::mm"), std::string::npos);
  EXPECT_FALSE(started.value()->Write(path).ok());  // once
}

}  // namespace
}  // namespace mitra::worker
