// RunPipelineStep and RunEvalPipeline: a pipeline of the tiny model's stages, ranks as threads
// (tests/worker/thread_ranks.h), computes the loss and the gradients that one thread running
// the whole model over the whole batch computes, in every schedule.
//
// Tolerance. float64 throughout (tests/worker/tiny_model.h). The pipeline adds the same
// per-sample terms in another order: each micro-batch's loss is scaled by 1/B and backpropagated
// on its own, and the micro-batches' gradients (and, with replicas, the replicas') are summed
// afterwards. A sum of n <= 8 terms reordered moves by at most about n * 2^-53 of the sum of
// their magnitudes: under 1e-14 of the result even if the terms cancel a hundredfold. We allow
// 1e-12. A real mistake (a micro-batch fed twice, a gradient sent to the wrong micro-batch) moves
// the results by a sizeable fraction of themselves: the guard test runs one through the same
// comparison.
#include "worker/step/pipeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <mutex>

#include <torch/torch.h>

#include "mitra/planner/schedule.h"
#include "tests/worker/thread_ranks.h"
#include "tests/worker/tiny_model.h"

namespace mitra::worker {
namespace {

using testing::RelativeDifference;

constexpr double kTolerance = 1e-12;
constexpr int kSegments = 4;
constexpr int64_t kBatch = 8;
constexpr int64_t kMicroBatch = 2;  // 4 micro-batches in the step

const cutpoint::ModelSpec& Spec() {
  static const cutpoint::ModelSpec spec = testing::TinyMlp(kSegments);
  return spec;
}

// The same model with layers whose weight gradients a zero-bubble schedule defers.
const cutpoint::ModelSpec& SplittableSpec() {
  static const cutpoint::ModelSpec spec = testing::TinyMlp(kSegments, /*splittable=*/true);
  return spec;
}

cutpoint::Activations GlobalMicroBatch(int64_t j) {
  static const testing::TinyDataset data(64);
  return testing::TinyBatch(data, j * kMicroBatch, (j + 1) * kMicroBatch);
}

struct StepOutcome {
  double loss = 0;                             // mean over the batch
  std::map<std::string, torch::Tensor> grads;  // by qualified name
  // With data parallelism, on each rank: buckets, and those started before the schedule ended.
  std::vector<std::pair<int, int>> buckets_started;
};

// The reference: the whole model over the whole batch in this thread, the loss divided by B.
StepOutcome OneThread(const cutpoint::ModelSpec& spec = Spec()) {
  Stage whole(spec, cutpoint::Partition{{kSegments}}, 0, /*seed=*/1);
  static const testing::TinyDataset data(64);
  const cutpoint::Activations batch = testing::TinyBatch(data, 0, kBatch);
  torch::Tensor loss = spec.loss(whole.Forward(batch, {}), batch) / kBatch;
  loss.backward();
  StepOutcome out;
  out.loss = loss.item<double>();
  for (const NamedTensor& p : whole.parameters()) out.grads[p.name] = p.tensor.grad().clone();
  return out;
}

struct Shape {
  int stages, replicas;
  planner::ScheduleKind schedule;
  bool recompute = false;
};

void PrintTo(const Shape& s, std::ostream* os) {
  *os << s.stages << "x" << s.replicas << " " << planner::ScheduleName(s.schedule)
      << (s.recompute ? " with recompute" : "");
}

// Feeds replica-local micro-batch `i` of a replica whose first is `first`.
using Feed = std::function<cutpoint::Activations(int64_t first, int i)>;

cutpoint::Activations RightFeed(int64_t first, int i) { return GlobalMicroBatch(first + i); }

// One training step of `shape` in threads: the replicas' losses summed, and the gradients of
// every rank's parameters after the data-parallel reduction (one entry per replica and name).
// The model: `model`, else TinyMlp (splittable under zb-h1).
std::vector<StepOutcome> RunShape(const Shape& shape, const Feed& feed = RightFeed,
                                  const cutpoint::ModelSpec* model = nullptr) {
  const int micro_batches = static_cast<int>(kBatch / kMicroBatch) / shape.replicas;
  const cutpoint::Partition partition =
      *cutpoint::MakePartition("uniform", kSegments, shape.stages);
  std::vector<StepOutcome> replicas(shape.replicas);
  std::mutex mu;
  const cutpoint::ModelSpec& spec =
      model ? *model : shape.schedule == planner::ScheduleKind::kZbH1 ? SplittableSpec() : Spec();
  testing::RunWithComms(shape.stages, shape.replicas, [&](const Placement& p, Comm& comm) {
    const int s = p.stage(), d = p.replica();
    Stage stage(spec, partition, s, /*seed=*/1);
    std::unique_ptr<GradReducer> reducer;
    if (comm.data_parallel() != nullptr) {
      reducer = std::make_unique<GradReducer>(stage.parameters(), comm.data_parallel(), &comm,
                                              /*bucket_elements=*/40);
    }
    PipelineContext ctx;
    ctx.spec = &spec;
    ctx.stage = &stage;
    ctx.comm = &comm;
    ctx.reducer = reducer.get();
    ctx.num_virtual_stages = shape.stages;
    ctx.chunks = {{s, s > 0 ? p.stage_map.RankOf(s - 1, d) : -1,
                   s + 1 < shape.stages ? p.stage_map.RankOf(s + 1, d) : -1}};
    ctx.loss_scale = 1.0 / kBatch;
    ctx.first_micro_batch = static_cast<int64_t>(d) * micro_batches;
    const auto schedule =
        planner::BuildSchedule(shape.schedule, shape.stages, s, micro_batches, shape.recompute);
    const double loss = RunPipelineStep(ctx, schedule, micro_batches, [&](int i) {
      return feed(ctx.first_micro_batch, i);
    });
    comm.WaitSends();
    const int started = reducer ? reducer->buckets_started() : 0;
    if (reducer) reducer->Finish();
    std::lock_guard<std::mutex> lock(mu);
    if (reducer) replicas[d].buckets_started.emplace_back(reducer->num_buckets(), started);
    replicas[d].loss += loss;
    for (const NamedTensor& param : stage.parameters()) {
      replicas[d].grads[param.name] = param.tensor.grad().clone();
    }
  });
  return replicas;
}

// The largest relative difference between `got` (every replica) and `expected`: the loss summed
// over the replicas, and each replica's every gradient.
double WorstDifference(const std::vector<StepOutcome>& got, const StepOutcome& expected) {
  double loss = 0;
  for (const StepOutcome& r : got) loss += r.loss;
  double worst = std::abs(loss - expected.loss) / std::abs(expected.loss);
  for (const StepOutcome& r : got) {
    EXPECT_EQ(r.grads.size(), expected.grads.size());
    for (const auto& [name, grad] : expected.grads) {
      auto it = r.grads.find(name);
      if (it == r.grads.end()) {
        ADD_FAILURE() << name << " has no gradient";
        continue;
      }
      worst = std::max(worst, RelativeDifference(it->second, grad));
    }
  }
  return worst;
}

class PipelineStep : public ::testing::TestWithParam<Shape> {};

TEST_P(PipelineStep, EqualsOneThreadRunningTheWholeModel) {
  const StepOutcome expected = OneThread();
  EXPECT_LE(WorstDifference(RunShape(GetParam()), expected), kTolerance);
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, PipelineStep,
    ::testing::Values(Shape{2, 1, planner::ScheduleKind::kGPipe},
                      Shape{2, 1, planner::ScheduleKind::k1F1B},
                      Shape{2, 1, planner::ScheduleKind::kVaruna},
                      Shape{2, 1, planner::ScheduleKind::k1F1B, /*recompute=*/true},
                      Shape{3, 1, planner::ScheduleKind::k1F1B},
                      Shape{2, 2, planner::ScheduleKind::k1F1B},
                      // Zero-bubble: the layers' weight gradients wait for their W.
                      Shape{1, 1, planner::ScheduleKind::kZbH1},
                      Shape{2, 1, planner::ScheduleKind::kZbH1},
                      Shape{3, 1, planner::ScheduleKind::kZbH1},
                      Shape{2, 1, planner::ScheduleKind::kZbH1, /*recompute=*/true},
                      Shape{2, 2, planner::ScheduleKind::kZbH1}));

// B leaves a splittable layer's weight gradients to W: none after B, all of them after W,
// equal to those of the layer's plain backward.
TEST(SplitBackward, BLeavesTheWeightGradientsToW) {
  auto weight = torch::randn({3, 4}, torch::kFloat64).requires_grad_(true);
  auto bias = torch::randn({3}, torch::kFloat64).requires_grad_(true);
  auto x = torch::randn({5, 4}, torch::kFloat64).requires_grad_(true);
  auto plain_weight = weight.detach().clone().requires_grad_(true);
  auto plain_bias = bias.detach().clone().requires_grad_(true);
  auto plain_x = x.detach().clone().requires_grad_(true);
  torch::tanh(torch::addmm(plain_bias, plain_x, plain_weight.t())).sum().backward();

  cutpoint::WeightGradients w;
  {
    cutpoint::SplitBackward split;
    torch::Tensor y = torch::tanh(cutpoint::linear(x, weight, bias));
    cutpoint::DeferWeightGradients defer(&w);
    y.sum().backward();
  }
  ASSERT_TRUE(x.grad().defined());
  EXPECT_LE(RelativeDifference(x.grad(), plain_x.grad()), kTolerance);
  EXPECT_FALSE(weight.grad().defined()) << "B computed the weight gradient";
  EXPECT_FALSE(bias.grad().defined()) << "B computed the bias gradient";
  ASSERT_FALSE(w.empty());
  w.Run();
  ASSERT_TRUE(weight.grad().defined() && bias.grad().defined());
  EXPECT_LE(RelativeDifference(weight.grad(), plain_weight.grad()), kTolerance);
  EXPECT_LE(RelativeDifference(bias.grad(), plain_bias.grad()), kTolerance);
  EXPECT_TRUE(w.empty());
  // W runs in grad mode, as the runtime runs it; a product it recorded would keep the output
  // gradient and x alive in the graph of weight.grad.
  EXPECT_FALSE(weight.grad().requires_grad()) << "W recorded a graph";
}

// Without a bias (nn.Linear(..., bias=False), F.linear(x, w)) the layer splits the same way;
// LibTorch's autograd functions take no undefined tensor, so it is a function of its own.
TEST(SplitBackward, ALayerWithoutBiasLeavesItsWeightGradientToW) {
  auto weight = torch::randn({3, 4}, torch::kFloat64).requires_grad_(true);
  auto x = torch::randn({5, 4}, torch::kFloat64).requires_grad_(true);
  auto plain_weight = weight.detach().clone().requires_grad_(true);
  auto plain_x = x.detach().clone().requires_grad_(true);
  torch::tanh(plain_x.mm(plain_weight.t())).sum().backward();

  cutpoint::WeightGradients w;
  {
    cutpoint::SplitBackward split;
    torch::Tensor y = torch::tanh(cutpoint::linear(x, weight, torch::Tensor()));
    cutpoint::DeferWeightGradients defer(&w);
    y.sum().backward();
  }
  EXPECT_LE(RelativeDifference(x.grad(), plain_x.grad()), kTolerance);
  EXPECT_FALSE(weight.grad().defined()) << "B computed the weight gradient";
  w.Run();
  ASSERT_TRUE(weight.grad().defined());
  EXPECT_LE(RelativeDifference(weight.grad(), plain_weight.grad()), kTolerance);
}

// Outside a zero-bubble schedule's forward the layer is torch's own: no function of mitra's in
// the graph, every gradient in the one backward.
// x -> tanh(linear(x, W, b) + x W^T / 4): W's gradient comes in two parts, one computed in B
// (autograd's, through the plain product) and one left for W (cutpoint::linear's).
class TwiceUsedWeight : public cutpoint::Segment {
 public:
  explicit TwiceUsedWeight(int salt) : dense_(salt, /*splittable=*/true) {
    register_module("dense", dense_);
  }
  cutpoint::Activations Forward(const cutpoint::Activations& inputs) override {
    const torch::Tensor& x = inputs.at("x");
    const torch::Tensor weight = dense_->named_parameters()["weight"];
    const torch::Tensor bias = dense_->named_parameters()["bias"];
    return {{"x", torch::tanh(cutpoint::linear(x, weight, bias) + 0.25 * x.mm(weight.t()))}};
  }

 private:
  torch::nn::ModuleHolder<testing::DenseSegment> dense_{nullptr};
};

// Data parallelism under zb-h1 reduces such a weight's gradient after both parts: a bucket
// started from the B part alone would reduce a gradient W then adds to, unreduced.
TEST(PipelineStepZb, AWeightWithGradientsFromBAndWIsReducedWhole) {
  static const cutpoint::ModelSpec spec = [] {
    cutpoint::ModelSpec s = testing::TinyMlp(kSegments);
    for (int i = 0; i < kSegments; ++i) {
      s.segments[i].factory = [i] { return std::make_shared<TwiceUsedWeight>(i); };
    }
    return s;
  }();
  const StepOutcome expected = OneThread(spec);
  for (const Shape& shape : {Shape{1, 1, planner::ScheduleKind::kZbH1},
                             Shape{2, 1, planner::ScheduleKind::kZbH1},
                             Shape{1, 2, planner::ScheduleKind::kZbH1},
                             Shape{2, 2, planner::ScheduleKind::kZbH1},
                             Shape{2, 2, planner::ScheduleKind::k1F1B}}) {
    const std::vector<StepOutcome> got = RunShape(shape, RightFeed, &spec);
    EXPECT_LT(WorstDifference(got, expected), kTolerance) << shape.stages << "x" << shape.replicas;
    // Every bucket started within the schedule, the last ones as the last W made them whole,
    // not when the step's reduction is finished.
    for (const StepOutcome& replica : got) {
      for (const auto& [buckets, started] : replica.buckets_started) EXPECT_EQ(started, buckets);
    }
  }
}

TEST(SplitBackward, WithoutTheScopeTheLayerIsTorchsLinear) {
  auto weight = torch::randn({3, 4}, torch::kFloat64).requires_grad_(true);
  auto x = torch::randn({5, 4}, torch::kFloat64);
  torch::Tensor y = cutpoint::linear(x, weight, torch::Tensor());
  EXPECT_EQ(y.grad_fn()->name().find("SplittableLinear"), std::string::npos) << y.grad_fn()->name();
  y.sum().backward();
  EXPECT_TRUE(weight.grad().defined());
}

// The same comparison fails for a pipeline that feeds a replica's first micro-batch twice
// instead of its last: its loss and gradients are off by far more than the tolerance.
TEST(PipelineStepGuard, TheComparisonFailsWhenAMicroBatchIsFedTwice) {
  const StepOutcome expected = OneThread();
  const int micro_batches = static_cast<int>(kBatch / kMicroBatch);
  const Feed twice = [micro_batches](int64_t first, int i) {
    return GlobalMicroBatch(first + (i == micro_batches - 1 ? 0 : i));
  };
  EXPECT_GT(WorstDifference(RunShape({2, 1, planner::ScheduleKind::k1F1B}, twice), expected),
            1e6 * kTolerance);
}

// Evaluation: forward only, the loss (unscaled) and a metric summed over the samples on the
// last stage, zeros elsewhere; no gradient anywhere.
TEST(EvalPipeline, SumsTheLossAndMetricsOverTheSamplesOnTheLastStage) {
  const MetricFn positive = [](const cutpoint::Activations& out, const cutpoint::Activations&) {
    return (out.at("x").sum(1) > 0).sum();
  };
  double expected_loss = 0, expected_metric = 0;
  {
    Stage whole(Spec(), cutpoint::Partition{{kSegments}}, 0, 1);
    torch::NoGradGuard no_grad;
    for (int64_t j = 0; j < kBatch / kMicroBatch; ++j) {
      const cutpoint::Activations batch = GlobalMicroBatch(j);
      const cutpoint::Activations out = whole.Forward(batch, {ForwardKey::kEvalStep, j});
      expected_loss += Spec().loss(out, batch).item<double>();
      expected_metric += positive(out, batch).item<double>();
    }
  }
  ASSERT_GT(expected_metric, 0);
  testing::RunWithComms(2, 1, [&](const Placement& p, Comm& comm) {
    Stage stage(Spec(), *cutpoint::MakePartition("uniform", kSegments, 2), p.stage(), 1);
    PipelineContext ctx;
    ctx.spec = &Spec();
    ctx.stage = &stage;
    ctx.comm = &comm;
    ctx.num_virtual_stages = 2;
    ctx.chunks = {{p.stage(), p.stage() == 1 ? 0 : -1, p.stage() == 0 ? 1 : -1}};
    ctx.step = ForwardKey::kEvalStep;
    const int micro_batches = static_cast<int>(kBatch / kMicroBatch);
    const std::vector<double> sums = RunEvalPipeline(
        ctx, planner::BuildForwardOnlySchedule(2, p.stage(), micro_batches), micro_batches,
        [](int i) { return GlobalMicroBatch(i); }, {positive});
    comm.WaitSends();
    ASSERT_EQ(sums.size(), 2u);
    if (p.stage() == 1) {
      EXPECT_NEAR(sums[0], expected_loss, kTolerance * expected_loss);
      EXPECT_EQ(sums[1], expected_metric);
    } else {
      EXPECT_EQ(sums[0], 0);
      EXPECT_EQ(sums[1], 0);
    }
    for (const NamedTensor& param : stage.parameters()) {
      EXPECT_FALSE(param.tensor.grad().defined()) << param.name;
    }
  });
}

}  // namespace
}  // namespace mitra::worker
