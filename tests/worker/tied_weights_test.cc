// TiedWeights: the copies of a tied weight on different stages start equal and receive the same
// gradient, the sum of every copy's, in every replica's pipeline on its own; ranks as threads
// (tests/worker/thread_ranks.h).
#include "worker/step/tied_weights.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include <torch/torch.h>

#include "tests/worker/thread_ranks.h"
#include "tests/worker/tiny_model.h"

namespace mitra::worker {
namespace {

// One chunk per stage: the partition's ranges are the stages.
planner::ChunkLayout Plain(const cutpoint::Partition& partition) {
  return planner::LayoutOf(planner::ScheduleKind::k1F1B, partition.num_stages());
}

// Segments l0, l1 on stage 0 and l2 on stage 1. Two ties: the weights of l0 and l2 (one member
// per stage) and the biases of all three (two members on stage 0).
struct TiedJob {
  cutpoint::ModelSpec spec = testing::TinyMlp(3);
  cutpoint::Partition partition{{2, 1}};
  TiedJob() {
    spec.TieWeights("weights", {"l0.weight", "l2.weight"});
    spec.TieWeights("biases", {"l0.bias", "l1.bias", "l2.bias"});
  }
};

// A gradient for `name` in `replica`'s pipeline, different for every member and replica.
torch::Tensor GradientOf(const std::string& name, int replica, c10::IntArrayRef sizes) {
  const double salt = static_cast<double>(std::hash<std::string>()(name) % 1000) / 7.0;
  int64_t n = 1;
  for (int64_t d : sizes) n *= d;
  return torch::sin(torch::arange(n, torch::kFloat64) * 0.3 + salt + 10 * replica).reshape(sizes);
}

TEST(TiedWeights, EveryCopyStartsAsTheFirstMember) {
  const TiedJob job;
  const Stage first(job.spec, job.partition, 0, /*seed=*/1);
  const torch::Tensor weight = first.Find("l0.weight").detach().clone();
  const torch::Tensor bias = first.Find("l0.bias").detach().clone();
  ASSERT_FALSE(torch::equal(weight, Stage(job.spec, job.partition, 1, 1).Find("l2.weight")))
      << "the copies must differ before the sync for this test to show anything";
  testing::RunWithComms(2, 2, [&](const Placement& p, Comm& comm) {
    Stage stage(job.spec, job.partition, p.stage(), 1);
    auto tied = TiedWeights::Create(job.spec, job.partition, Plain(job.partition), p, stage);
    ASSERT_TRUE(tied.ok()) << tied.status().message();
    tied->SyncInitialValues(comm);
    if (p.stage() == 0) {
      EXPECT_TRUE(torch::equal(stage.Find("l0.weight"), weight));
      EXPECT_TRUE(torch::equal(stage.Find("l1.bias"), bias));
    } else {
      EXPECT_TRUE(torch::equal(stage.Find("l2.weight"), weight));
      EXPECT_TRUE(torch::equal(stage.Find("l2.bias"), bias));
    }
  });
}

// Each copy's gradient becomes the sum of all copies' gradients in this replica, added in the
// documented order (members of a stage, then stages in order), so every copy holds the same
// bits; a copy without a gradient counts as zeros; other parameters are left alone.
TEST(TiedWeights, EveryCopyGetsTheSumOfTheCopiesGradientsOfItsReplica) {
  const TiedJob job;
  testing::RunWithComms(2, 2, [&](const Placement& p, Comm& comm) {
    Stage stage(job.spec, job.partition, p.stage(), 1);
    auto tied = TiedWeights::Create(job.spec, job.partition, Plain(job.partition), p, stage);
    ASSERT_TRUE(tied.ok()) << tied.status().message();
    const int d = p.replica();
    for (const NamedTensor& param : stage.parameters()) {
      if (param.name == "l1.bias" && d == 1) continue;  // no gradient
      param.tensor.mutable_grad() = GradientOf(param.name, d, param.tensor.sizes());
    }
    tied->SumGradients(comm);

    const auto g = [d](const std::string& name, c10::IntArrayRef sizes) {
      return GradientOf(name, d, sizes);
    };
    const torch::Tensor weights = g("l0.weight", {6, 6}) + g("l2.weight", {6, 6});
    const torch::Tensor l1_bias = d == 1 ? torch::zeros({6}, torch::kFloat64) : g("l1.bias", {6});
    const torch::Tensor biases = (g("l0.bias", {6}) + l1_bias) + g("l2.bias", {6});
    if (p.stage() == 0) {
      EXPECT_TRUE(torch::equal(stage.Find("l0.weight").grad(), weights));
      EXPECT_TRUE(torch::equal(stage.Find("l0.bias").grad(), biases));
      EXPECT_TRUE(torch::equal(stage.Find("l1.bias").grad(), biases));
      EXPECT_TRUE(torch::equal(stage.Find("l1.weight").grad(), g("l1.weight", {6, 6})));
    } else {
      EXPECT_TRUE(torch::equal(stage.Find("l2.weight").grad(), weights));
      EXPECT_TRUE(torch::equal(stage.Find("l2.bias").grad(), biases));
    }
    EXPECT_TRUE(tied->IsSecondaryCopy("l2.weight"));
    EXPECT_TRUE(tied->IsSecondaryCopy("l1.bias"));
    EXPECT_FALSE(tied->IsSecondaryCopy("l0.weight"));
  });
}

TEST(TiedWeights, AMemberThatNamesNoParameterIsRefused) {
  TiedJob job;
  job.spec.TieWeights("typo", {"l0.weight", "l2.wieght"});
  const Stage stage(job.spec, job.partition, 1, 1);
  auto tied = TiedWeights::Create(job.spec, job.partition, Plain(job.partition),
                                  testing::LoopbackPlacement(2, 1, /*rank=*/1), stage);
  ASSERT_FALSE(tied.ok());
  EXPECT_NE(tied.status().message().find("segment 'l2' has no parameter 'wieght'"),
            std::string::npos)
      << tied.status().message();
}

}  // namespace
}  // namespace mitra::worker
