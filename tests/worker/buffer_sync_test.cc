// BufferSync: after each step the replicas of a stage hold the BatchNorm running statistics that
// one replica running all of the step's micro-batches in their global order would hold, and
// replica 0's value of every other buffer (worker/step/buffer_sync.h); ranks as threads
// (tests/worker/thread_ranks.h).
//
// Tolerance. float64 throughout. BufferSync composes each replica's affine update of the
// statistics (or, for a cumulative average, re-weights the replicas' sums) where the reference
// applies the updates one by one: the same values combined by a handful of other operations,
// each rounding by 2^-53 of its result. We allow 1e-12 of the statistic's size; a replica's
// micro-batches left out move the statistics by a sizeable fraction (the guard test).
#include "worker/step/buffer_sync.h"

#include <gtest/gtest.h>

#include <optional>

#include <torch/torch.h>

#include "tests/worker/thread_ranks.h"
#include "tests/worker/tiny_model.h"
#include "worker/step/pipeline_partitions.h"

namespace mitra::worker {
namespace {

using testing::RelativeDifference;

constexpr double kTolerance = 1e-12;
constexpr int64_t kMicroBatch = 3;

// BatchNorm over "x", and a buffer "seen" that counts the samples this copy has seen.
class NormSegment : public cutpoint::Segment {
 public:
  explicit NormSegment(c10::optional<double> momentum) {
    norm_ = register_module(
        "norm", torch::nn::BatchNorm1d(
                    torch::nn::BatchNorm1dOptions(testing::kTinyWidth).momentum(momentum)));
    seen_ = register_buffer("seen", torch::zeros({1}, torch::kFloat64));
    to(torch::kFloat64);
  }
  cutpoint::Activations Forward(const cutpoint::Activations& inputs) override {
    seen_ += inputs.at("x").size(0);
    return {{"x", norm_(inputs.at("x"))}};
  }

 private:
  torch::nn::BatchNorm1d norm_{nullptr};
  torch::Tensor seen_;
};

cutpoint::ModelSpec NormModel(c10::optional<double> momentum) {
  cutpoint::ModelSpec spec;
  spec.AddSegment("bn", [momentum] { return std::make_shared<NormSegment>(momentum); });
  spec.loss = [](const cutpoint::Activations& out, const cutpoint::Activations&) {
    return out.at("x").sum();
  };
  return spec;
}

// Global micro-batch j of the job: samples [3j, 3j + 3), shifted and scaled so that the
// statistics move far from their start.
cutpoint::Activations MicroBatch(int64_t j) {
  const testing::TinyDataset data(64);
  cutpoint::Activations batch = testing::TinyBatch(data, kMicroBatch * j, kMicroBatch * (j + 1));
  batch["x"] = batch["x"] * 3 + 2;
  return batch;
}

// Two steps of four micro-batches: replica 0 runs two of each step's, replicas 1 and 2 one
// each (a batch that three replicas do not divide evenly).
std::vector<int64_t> MicroBatchesOf(int replica, int step) {
  const int64_t first = 4 * step;
  if (replica == 0) return {first, first + 1};
  return {first + 1 + replica};
}

std::map<std::string, torch::Tensor> Buffers(const Stage& stage) {
  std::map<std::string, torch::Tensor> out;
  for (const NamedTensor& b : stage.buffers()) out[b.name] = b.tensor.detach().clone();
  return out;
}

// The statistics of one copy of the model that ran `micro_batches` in this order.
std::map<std::string, torch::Tensor> RunInOrder(const cutpoint::ModelSpec& spec,
                                                const std::vector<int64_t>& micro_batches) {
  Stage stage(spec, cutpoint::Partition{{spec.num_segments()}}, 0, 1);
  for (int64_t j : micro_batches) stage.Forward(MicroBatch(j), {});
  return Buffers(stage);
}

TEST(BufferSync, RunningStatisticsAreThoseOfAllMicroBatchesInGlobalOrder) {
  for (c10::optional<double> momentum : {c10::optional<double>(0.1), c10::optional<double>()}) {
    SCOPED_TRACE(momentum ? "momentum 0.1" : "cumulative average");
    const cutpoint::ModelSpec spec = NormModel(momentum);
    const auto expected = RunInOrder(spec, {0, 1, 2, 3, 4, 5, 6, 7});
    std::vector<std::map<std::string, torch::Tensor>> got(3);
    testing::RunWithComms(1, 3, [&](const Placement& p, Comm& comm) {
      Stage stage(spec, cutpoint::Partition{{1}}, 0, 1);
      std::unique_ptr<BufferSync> sync = BufferSync::Create(stage, &comm);
      ASSERT_NE(sync, nullptr);
      for (int step = 0; step < 2; ++step) {
        sync->BeginStep();
        for (int64_t j : MicroBatchesOf(p.replica(), step)) stage.Forward(MicroBatch(j), {});
        sync->EndStep();
      }
      got[p.replica()] = Buffers(stage);
    });
    for (const std::string name : {"bn.norm.running_mean", "bn.norm.running_var"}) {
      ASSERT_TRUE(got[0].count(name)) << name;
      EXPECT_LE(RelativeDifference(got[0][name], expected.at(name)), kTolerance) << name;
    }
    EXPECT_EQ(got[0]["bn.norm.num_batches_tracked"].item<int64_t>(), 8);
    // Any other buffer is replica 0's: it saw micro-batches 0, 1, 4 and 5.
    EXPECT_EQ(got[0]["bn.seen"].item<double>(), 4 * kMicroBatch);
    for (int d = 1; d < 3; ++d) {
      for (const auto& [name, value] : got[0]) {
        EXPECT_TRUE(torch::equal(got[d][name], value)) << name << " of replica " << d;
      }
    }
  }
}

// Three BatchNorm segments in a 2 x 2 job whose pipelines are cut 1,2 and 2,1: segment 0 is
// held by ranks 0 and 2, segment 1 by ranks 1 and 2, segment 2 by ranks 1 and 3. Each group
// keeps its segments' statistics those of all the step's micro-batches in global order (replica
// 0 runs the first two of each step's four, replica 1 the last two).
TEST(BufferSync, EachPipelineCutItsWayKeepsEverySegmentEqualOverItsHolders) {
  cutpoint::ModelSpec spec = NormModel(0.1);
  spec.segments.clear();
  for (const char* name : {"bn0", "bn1", "bn2"}) {
    spec.AddSegment(name, [] { return std::make_shared<NormSegment>(0.1); });
  }
  const auto expected = RunInOrder(spec, {0, 1, 2, 3, 4, 5, 6, 7});
  const std::vector<cutpoint::Partition> cuts = {cutpoint::Partition{{1, 2}},
                                                 cutpoint::Partition{{2, 1}}};
  std::vector<std::map<std::string, torch::Tensor>> got(4);
  testing::RunWithComms(2, 2, [&](const Placement& p, Comm& comm) {
    const cutpoint::Partition& mine = cuts[p.replica()];
    Stage stage(spec, mine, p.stage(), 1);
    // What the stage before gives this one: the same segments' forward (BatchNorm in training
    // normalises by the micro-batch, whatever its statistics).
    const int first = mine.FirstSegment(p.stage());
    std::optional<Stage> before;
    if (first > 0) before.emplace(spec, cutpoint::Partition{{first, 3 - first}}, 0, 1);
    const PipelinePartitions pipelines(cuts, planner::ChunkLayout{2, 1, false}, p.stage_map);
    std::vector<std::unique_ptr<BufferSync>> syncs;
    for (const ReductionGroup& group : pipelines.GroupsOf(p.rank)) {
      syncs.push_back(
          BufferSync::Create(stage, &comm, comm.ReductionGroup(group.ranks), group.segments));
      ASSERT_NE(syncs.back(), nullptr);
    }
    for (int step = 0; step < 2; ++step) {
      for (auto& sync : syncs) sync->BeginStep();
      for (int64_t j = 4 * step + 2 * p.replica(); j < 4 * step + 2 * p.replica() + 2; ++j) {
        const cutpoint::Activations batch = MicroBatch(j);
        stage.Forward(before ? before->Forward(batch, {}) : batch, {});
      }
      for (auto& sync : syncs) sync->EndStep();
    }
    got[p.rank] = Buffers(stage);
  });
  int compared = 0;
  for (int rank = 0; rank < 4; ++rank) {
    for (const auto& [name, value] : got[rank]) {
      if (name.find("running_") == std::string::npos) continue;
      EXPECT_LE(RelativeDifference(value, expected.at(name)), kTolerance)
          << name << " of rank " << rank;
      ++compared;
    }
  }
  EXPECT_EQ(compared, 2 * 2 * 3) << "every segment's mean and variance in both replicas";
  EXPECT_EQ(got[2]["bn1.norm.num_batches_tracked"].item<int64_t>(), 8);
}

// The comparison above sees the micro-batches of replicas 1 and 2 left out: replica 0's own
// statistics, which broadcasting its buffers would give everyone, are far from the reference.
TEST(BufferSync, GuardTheComparisonFailsWithReplicaZerosStatisticsOnly) {
  const cutpoint::ModelSpec spec = NormModel(0.1);
  const auto all = RunInOrder(spec, {0, 1, 2, 3, 4, 5, 6, 7});
  const auto replica_zero = RunInOrder(spec, {0, 1, 4, 5});
  for (const std::string name : {"bn.norm.running_mean", "bn.norm.running_var"}) {
    EXPECT_GT(RelativeDifference(replica_zero.at(name), all.at(name)), 1e6 * kTolerance) << name;
  }
}

TEST(BufferSync, NothingToKeepEqualWithOneReplicaOrNoBuffers) {
  const cutpoint::ModelSpec norm = NormModel(0.1);
  testing::RunWithComms(1, 1, [&](const Placement&, Comm& comm) {
    Stage stage(norm, cutpoint::Partition{{1}}, 0, 1);
    EXPECT_EQ(BufferSync::Create(stage, &comm), nullptr);
  });
  const cutpoint::ModelSpec mlp = testing::TinyMlp(1);
  testing::RunWithComms(1, 2, [&](const Placement&, Comm& comm) {
    Stage stage(mlp, cutpoint::Partition{{1}}, 0, 1);
    EXPECT_EQ(BufferSync::Create(stage, &comm), nullptr);
  });
}

}  // namespace
}  // namespace mitra::worker
