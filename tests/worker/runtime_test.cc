// Runtime: a 2 x 2 job of the tiny model, ranks as threads (tests/worker/thread_ranks.h) that
// meet through the real rendezvous (Comm::Connect, the job's store on loopback), trains as a plain
// LibTorch loop over the whole model and batch does: the same losses, gradient norms, clipped
// gradients and AdamW updates.
//
// Tolerance. float64 throughout (tests/worker/tiny_model.h). Before the first update every
// quantity is the same sums in another order (micro-batches, replicas, stages, the norm added
// per stage): within 1e-12 (tests/worker/pipeline_test.cc says why). AdamW then divides by
// sqrt(v) + eps, which can magnify a rounding-level difference of a gradient near zero up to
// lr * dg / eps ~ 3e-4 * 1e-13 / 1e-8 ~ 3e-9 of a parameter: from the first update on
// (parameters, and the later step's loss and gradients) we allow 1e-7. Training on another
// batch (the guard test) moves the gradients by a sizeable fraction of themselves.
#include "mitra/worker/runtime.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <set>
#include <tuple>

#include <torch/torch.h>

#include "common/free_port.h"
#include "mitra/worker/stage.h"
#include "tests/worker/thread_ranks.h"
#include "tests/worker/tiny_model.h"

namespace mitra::worker {
namespace {

using testing::RelativeDifference;

constexpr double kBeforeUpdate = 1e-12;
constexpr double kAfterUpdate = 1e-7;
constexpr int kSegments = 4;
constexpr int64_t kBatch = 8;
constexpr int kSteps = 2;
constexpr uint64_t kSeed = 5;

const cutpoint::ModelSpec& Spec() {
  static const cutpoint::ModelSpec spec = testing::TinyMlp(kSegments);
  return spec;
}

// Position p of the sample stream is sample p: the reference needs no permutation.
class InOrder : public Sampler {
 public:
  explicit InOrder(int64_t size) : size_(size) {}
  int64_t IndexAt(int64_t position) override { return position % size_; }

 private:
  int64_t size_;
};

struct StepState {
  double loss = 0, grad_norm = 0;
  std::map<std::string, torch::Tensor> grads;   // clipped, as the update used them
  std::map<std::string, torch::Tensor> params;  // after the update
};
using Trajectory = std::vector<StepState>;

// The reference: the whole model over the whole batch, torch's clip_grad_norm_ and AdamW with
// the runtime's defaults, starting `offset` samples into the stream.
Trajectory PlainLoop(int64_t offset = 0) {
  const testing::TinyDataset data(64);
  std::vector<std::shared_ptr<cutpoint::Segment>> segments;
  std::map<std::string, torch::Tensor> named;
  std::vector<torch::Tensor> params;
  for (int i = 0; i < kSegments; ++i) {
    segments.push_back(cutpoint::BuildSegment(Spec(), i, kSeed));
    for (const auto& p : segments.back()->named_parameters()) {
      named[Spec().segments[i].name + "." + p.key()] = p.value();
      params.push_back(p.value());
    }
  }
  const RuntimeOptions defaults;
  torch::optim::AdamW adamw(params, torch::optim::AdamWOptions(defaults.lr.base)
                                        .betas({defaults.optimizer.beta1, defaults.optimizer.beta2})
                                        .eps(defaults.optimizer.eps)
                                        .weight_decay(defaults.optimizer.weight_decay));
  Trajectory out;
  for (int step = 0; step < kSteps; ++step) {
    const cutpoint::Activations batch =
        testing::TinyBatch(data, offset + step * kBatch, offset + (step + 1) * kBatch);
    cutpoint::Activations acts = batch;
    for (const auto& segment : segments) acts = segment->Forward(acts);
    torch::Tensor loss = Spec().loss(acts, batch) / kBatch;
    adamw.zero_grad();
    loss.backward();
    StepState state;
    state.loss = loss.item<double>();
    state.grad_norm = torch::nn::utils::clip_grad_norm_(params, defaults.clip_norm);
    for (const auto& [name, p] : named) state.grads[name] = p.grad().clone();
    adamw.step();
    for (const auto& [name, p] : named) state.params[name] = p.detach().clone();
    out.push_back(std::move(state));
  }
  return out;
}

// The 2 x 2 job: every rank's StepResult and the tensors of its stage after each step, merged
// by name (a rank holds half the parameters; its replica holds the same values); each rank's
// optimizer state at the end and its micro-batches per step.
struct JobRun {
  std::vector<Trajectory> ranks = std::vector<Trajectory>(4, Trajectory(kSteps));
  std::vector<int64_t> optimizer_bytes = std::vector<int64_t>(4);
  std::vector<int> micro_batches = std::vector<int>(4);
};

// `zero`: RuntimeOptions::zero; `shares` and `partition`: the placement's (MITRA_SHARES,
// MITRA_PARTITION).
JobRun RunJob(int zero = 0, const std::vector<int64_t>& shares = {},
              const std::string& partition = "") {
  JobRun run;
  auto port = PickFreeTcpPort("127.0.0.1");
  EXPECT_TRUE(port.ok()) << port.status().message();
  if (!port.ok()) return run;
  std::mutex mu;
  auto dataset = std::make_shared<testing::TinyDataset>(64);
  testing::RunRanks(4, [&](int rank) {
    RuntimeOptions options;
    options.global_batch = kBatch;
    options.chunk_size = 2;
    options.seed = kSeed;
    options.zero = zero;
    options.custom_sampler = [](int64_t size, uint64_t) {
      return std::make_unique<InOrder>(size);
    };
    contract::Placement placement = testing::LoopbackPlacement(2, 2, rank, *port);
    placement.shares = shares;
    placement.partition = partition;
    auto runtime = Runtime::Create(Spec(), dataset, placement, options);
    ASSERT_TRUE(runtime.ok()) << runtime.status().message();
    for (int step = 0; step < kSteps; ++step) {
      const StepResult result = (*runtime)->Step(step);
      std::lock_guard<std::mutex> lock(mu);
      StepState& state = run.ranks[rank][step];
      state.loss = result.loss;
      state.grad_norm = result.grad_norm;
      for (const NamedTensor& p : (*runtime)->stage().parameters()) {
        state.grads[p.name] = p.tensor.grad().clone();
        state.params[p.name] = p.tensor.detach().clone();
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    run.optimizer_bytes[rank] = (*runtime)->OptimizerStateBytes();
    run.micro_batches[rank] = (*runtime)->num_micro_batches();
  });
  return run;
}

// The worst relative differences of `got` from `expected`: before the first update (the first
// step's loss, norm and gradients), and from the update on (everything else). Names that
// `got` lacks are skipped: a rank holds only its stage's parameters.
std::pair<double, double> Differences(const Trajectory& got, const Trajectory& expected) {
  double before = 0, after = 0;
  auto relative = [](double a, double b) { return std::abs(a - b) / std::abs(b); };
  for (int step = 0; step < kSteps; ++step) {
    double& worst = step == 0 ? before : after;
    worst = std::max({worst, relative(got[step].loss, expected[step].loss),
                      relative(got[step].grad_norm, expected[step].grad_norm)});
    for (const auto& [name, grad] : got[step].grads) {
      worst = std::max(worst, RelativeDifference(grad, expected[step].grads.at(name)));
    }
    for (const auto& [name, param] : got[step].params) {
      after = std::max(after, RelativeDifference(param, expected[step].params.at(name)));
    }
  }
  return {before, after};
}

TEST(Runtime, TwoStagesTimesTwoReplicasTrainAsOneThreadRunningTheWholeModel) {
  const Trajectory expected = PlainLoop();
  const std::vector<Trajectory> ranks = RunJob().ranks;
  std::set<std::string> seen;
  for (int rank = 0; rank < 4; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const auto [before, after] = Differences(ranks[rank], expected);
    EXPECT_LE(before, kBeforeUpdate);
    EXPECT_LE(after, kAfterUpdate);
    for (const auto& [name, param] : ranks[rank][0].params) seen.insert(name);
  }
  EXPECT_EQ(seen.size(), expected[0].params.size()) << "some parameters are held by no rank";
}

// ZeRO-1: each replica updates and keeps the optimizer state of half its stage's segments and
// sends the others the parameters it updated. The arithmetic is the same as without: the same
// tolerances hold, and each rank holds half the optimizer state (the tiny model's segments are
// all of one size).
TEST(Runtime, UnderZeroOneEachReplicaKeepsHalfTheOptimizerStateAndTrainsTheSame) {
  const Trajectory expected = PlainLoop();
  const std::vector<int64_t> whole = RunJob(0).optimizer_bytes;
  const JobRun run = RunJob(1);
  const std::vector<Trajectory>& ranks = run.ranks;
  const std::vector<int64_t>& sharded = run.optimizer_bytes;
  for (int rank = 0; rank < 4; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const auto [before, after] = Differences(ranks[rank], expected);
    EXPECT_LE(before, kBeforeUpdate);
    EXPECT_LE(after, kAfterUpdate);
    // The replicas agree: what one updated, the other received.
    const int replica = rank ^ 2;  // 2 x 2: stage s on ranks s and s + 2
    for (const auto& [name, param] : ranks[rank].back().params) {
      EXPECT_TRUE(torch::equal(param, ranks[replica].back().params.at(name))) << name;
    }
    ASSERT_GT(whole[rank], 0);
    EXPECT_EQ(2 * sharded[rank], whole[rank]);
  }
}

// Replicas on machines of different speeds take uneven shares of the batch's 4 micro-batches:
// the same samples once, so the same update.
TEST(Runtime, UnevenSharesOfTheBatchTrainAsOneThread) {
  const Trajectory expected = PlainLoop();
  for (const int first : {3, 1}) {
    const JobRun run = RunJob(0, {first, 4 - first});
    // 2 x 2: replica 0 is ranks 0 and 1; each took its share.
    EXPECT_EQ(run.micro_batches, (std::vector<int>{first, first, 4 - first, 4 - first}));
    for (int rank = 0; rank < 4; ++rank) {
      SCOPED_TRACE("shares " + std::to_string(first) + "," + std::to_string(4 - first) +
                   ", rank " + std::to_string(rank));
      const auto [before, after] = Differences(run.ranks[rank], expected);
      EXPECT_LE(before, kBeforeUpdate);
      EXPECT_LE(after, kAfterUpdate);
    }
  }
}

// Each pipeline cuts the model where its machines are balanced: in "1,3/3,1" replica 0's stage
// 0 holds segment 0 and replica 1's holds segments 0-2, so segment 0's gradients are reduced by
// ranks 0 and 2, segments 1-2's by ranks 1 and 2, segment 3's by ranks 1 and 3. The same update
// as one thread, alone and with uneven shares of the batch.
TEST(Runtime, EachPipelineWithItsOwnPartitionTrainsAsOneThread) {
  const Trajectory expected = PlainLoop();
  for (const auto& [partition, shares] :
       std::vector<std::pair<std::string, std::vector<int64_t>>>{
           {"1,3/3,1", {}}, {"3,1/2,2", {}}, {"1,3/3,1", {1, 3}}}) {
    const JobRun run = RunJob(0, shares, partition);
    std::set<std::string> replica_one;
    for (int rank = 0; rank < 4; ++rank) {
      SCOPED_TRACE("partition " + partition + ", rank " + std::to_string(rank));
      const auto [before, after] = Differences(run.ranks[rank], expected);
      EXPECT_LE(before, kBeforeUpdate);
      EXPECT_LE(after, kAfterUpdate);
      if (rank >= 2) {
        for (const auto& [name, param] : run.ranks[rank][0].params) replica_one.insert(name);
      }
    }
    // Replica 1 holds the whole model too, cut its own way.
    EXPECT_EQ(replica_one.size(), expected[0].params.size()) << partition;
  }
  // Cut its own way indeed: replica 1's first stage holds more than replica 0's.
  const JobRun run = RunJob(0, {}, "1,3/3,1");
  EXPECT_LT(run.ranks[0][0].params.size(), run.ranks[2][0].params.size());
}

TEST(Runtime, APartitionPerPipelineNeedsOneForEachReplicaAndNoZeroOne) {
  auto dataset = std::make_shared<testing::TinyDataset>(64);
  using Case = std::tuple<std::string, int, std::string>;  // partition, --zero, the message
  for (const auto& [partition, zero, words] : std::vector<Case>{
           {"1,3/3,1/2,2", 0, "gives 3 pipelines' counts and the job has 2"},
           {"1,3/4,1", 0, "replica 1's partition"},
           {"1,3/3,1", 1, "use --zero 0 with it"}}) {
    RuntimeOptions options;
    options.global_batch = kBatch;
    options.chunk_size = 2;
    options.zero = zero;
    contract::Placement placement = testing::LoopbackPlacement(2, 2, 0, 1);
    placement.partition = partition;
    auto runtime = Runtime::Create(Spec(), dataset, placement, options);
    ASSERT_FALSE(runtime.ok()) << partition;
    EXPECT_NE(runtime.status().message().find(words), std::string::npos)
        << runtime.status().message();
  }
}

TEST(Runtime, SharesThatDoNotCoverTheBatchAreRefusedNamingTheVariable) {
  auto dataset = std::make_shared<testing::TinyDataset>(64);
  RuntimeOptions options;
  options.global_batch = kBatch;
  options.chunk_size = 2;
  for (const auto& [shares, words] : std::vector<std::pair<std::vector<int64_t>, std::string>>{
           {{3, 3}, "4 in all"}, {{4}, "one count per replica"}}) {
    contract::Placement placement = testing::LoopbackPlacement(1, 2, 0, 1);
    placement.shares = shares;
    auto runtime = Runtime::Create(Spec(), dataset, placement, options);
    ASSERT_FALSE(runtime.ok()) << shares.size();
    EXPECT_NE(runtime.status().message().find("MITRA_SHARES: "), std::string::npos)
        << runtime.status().message();
    EXPECT_NE(runtime.status().message().find(words), std::string::npos)
        << runtime.status().message();
  }
}

// The same comparison fails for a job that trained on other samples (the batch shifted by
// one): the first step's gradients are far off.
TEST(Runtime, GuardTheComparisonFailsForAnotherBatch) {
  const auto [before, after] = Differences(PlainLoop(/*offset=*/1), PlainLoop());
  EXPECT_GT(before, 1e6 * kBeforeUpdate);
}

}  // namespace
}  // namespace mitra::worker
