// Unit tests of the worker's pure parts: sampler, replica shares, LR schedule, stage memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "examples/gpt/gpt_model.h"
#include "worker/data.h"
#include "worker/lr_schedule.h"
#include "worker/placement.h"
#include "worker/stage.h"

namespace mitra::worker {
namespace {

TEST(Sampler, OrderIsAPureFunctionOfSeedAndStep) {
  Sampler a(1000, 32, 7), b(1000, 32, 7), c(1000, 32, 8);
  EXPECT_EQ(a.Indices(5, 0, 32), b.Indices(5, 0, 32));
  EXPECT_NE(a.Indices(5, 0, 32), c.Indices(5, 0, 32));
  // Asking out of order gives the same answers.
  auto late = b.Indices(40, 0, 32);
  b.Indices(0, 0, 32);
  EXPECT_EQ(b.Indices(40, 0, 32), late);
}

TEST(Sampler, ReplicaSlicesTileTheGlobalBatchForAnyReplicaCount) {
  Sampler sampler(500, 30, 3);
  const auto whole = sampler.Indices(2, 0, 30);
  for (int replicas : {1, 2, 3, 4, 7, 30}) {
    std::vector<int64_t> joined;
    for (int d = 0; d < replicas; ++d) {
      auto share = ShareOf(30, replicas, d);
      auto part = sampler.Indices(2, share.offset, share.count);
      joined.insert(joined.end(), part.begin(), part.end());
    }
    EXPECT_EQ(joined, whole) << replicas << " replicas";
  }
}

TEST(Sampler, EachEpochVisitsEverySampleOnce) {
  Sampler sampler(100, 10, 1);
  std::vector<int64_t> epoch;
  for (int step = 0; step < 10; ++step) {
    auto part = sampler.Indices(step, 0, 10);
    epoch.insert(epoch.end(), part.begin(), part.end());
  }
  std::sort(epoch.begin(), epoch.end());
  for (int64_t i = 0; i < 100; ++i) EXPECT_EQ(epoch[i], i);
  // The next epoch is another permutation.
  EXPECT_NE(sampler.Indices(10, 0, 10), sampler.Indices(0, 0, 10));
}

TEST(Sampler, BatchesStraddleEpochBoundaries) {
  Sampler sampler(25, 10, 1);  // step 2 takes positions 20..29: 5 from epoch 0, 5 from epoch 1
  auto straddle = sampler.Indices(2, 0, 10);
  std::set<int64_t> first(straddle.begin(), straddle.begin() + 5);
  EXPECT_EQ(first.size(), 5u);
}

TEST(ReplicaShare, FirstReplicasTakeTheRemainder) {
  EXPECT_EQ(ShareOf(32, 3, 0).count, 11);
  EXPECT_EQ(ShareOf(32, 3, 1).count, 11);
  EXPECT_EQ(ShareOf(32, 3, 2).count, 10);
  EXPECT_EQ(ShareOf(32, 3, 2).offset, 22);
  EXPECT_EQ(ShareOf(8, 8, 7).count, 1);
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

}  // namespace
}  // namespace mitra::worker
