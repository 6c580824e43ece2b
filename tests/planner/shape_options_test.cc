// The shapes the planner considers, on their own.
#include "planner/shape_options.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <utility>

#include "tests/planner/uniform_profile.h"

namespace mitra::planner::detail {
namespace {

TEST(ReplicaCounts, EveryCountOnSmallListsPowersOfTwoOnLargeOnes) {
  EXPECT_EQ(ReplicaCounts(3), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(ReplicaCounts(64).size(), 64u);
  EXPECT_EQ(ReplicaCounts(100), (std::vector<int>{1, 2, 4, 8, 16, 32, 64, 100}));
}

TEST(MicroBatchSizes, TheProfiledOnesAndTheShapesDefaultOrOnlyTheFixedOne) {
  const Profile p = Uniform(4, 0.01, 0.02);  // profiled at 1, 2, 4, 8
  PlanRequest request;
  request.profile = &p;
  request.global_batch = 96;
  // 2 stages, 3 replicas: 96 / 3 = 32 samples a replica in about 4 P = 8 micro-batches of 4.
  EXPECT_EQ(MicroBatchSizes(request, 2, 3), (std::set<int64_t>{1, 2, 4, 8}));
  EXPECT_EQ(MicroBatchSizes(request, 1, 1), (std::set<int64_t>{1, 2, 4, 8, 96}));
  request.chunk_size = 3;
  EXPECT_EQ(MicroBatchSizes(request, 2, 3), (std::set<int64_t>{3}));
}

TEST(StagePartition, AStageOnASlowerMachineTakesLessWork) {
  Profile p = Uniform(6, 0.01, 0.02);
  p.machines.push_back(p.machines[0]);
  p.machines[1].address = "slow";
  for (SegmentProfile& s : p.machines[1].segments) {
    for (SegmentCost& c : s.costs) {
      c.forward_s *= 2;
      c.backward_s *= 2;
    }
  }
  EXPECT_EQ(StagePartition(p, {"m0", "m0"}, 2, 1, 4), (std::vector<int>{3, 3}));
  EXPECT_EQ(StagePartition(p, {"m0", "slow"}, 2, 1, 4), (std::vector<int>{4, 2}));
}

TEST(EnumerateShapeOptions, RecomputationOnlyWhereItCanHelpAndBoundsAscending) {
  const Profile p = Uniform(4, 0.01, 0.02);
  PlanRequest request;
  request.profile = &p;
  request.global_batch = 16;
  request.machines = {{"m0", 4}};
  const std::vector<ShapeOption> options = EnumerateShapeOptions(request, 4);
  ASSERT_FALSE(options.empty());
  double previous = 0;
  int recomputed = 0;
  for (const ShapeOption& o : options) {
    const Candidate& c = o.candidate;
    EXPECT_GE(o.bound, previous) << c.ToString();
    previous = o.bound;
    EXPECT_LE(c.stages * c.replicas, 4) << c.ToString();
    if (c.stages == 1) {
      EXPECT_EQ(c.schedule, ScheduleKind::k1F1B) << c.ToString();
      EXPECT_FALSE(c.recompute) << c.ToString();
    }
    if (c.schedule == ScheduleKind::kVaruna) {
      EXPECT_FALSE(c.recompute) << c.ToString();
    }
    recomputed += c.recompute;
  }
  EXPECT_GT(recomputed, 0);
}

TEST(EnumerateShapeOptions, TheBoundIsTheBusiestStagesComputeWithRecomputedForwards) {
  const double f = 0.01, b = 0.02;
  const Profile p = Uniform(4, f, b);
  PlanRequest request;
  request.profile = &p;
  request.global_batch = 8;
  request.machines = {{"m0", 2}};
  request.stages = 2;
  request.chunk_size = 2;  // 4 micro-batches, all on the one replica
  const std::vector<ShapeOption> options = EnumerateShapeOptions(request, 2);
  for (const ShapeOption& o : options) {
    const Candidate& c = o.candidate;
    if (c.replicas != 1) continue;
    // Interleaved and zb-v cut the 4 segments into a range per chunk, two per rank.
    const bool chunks = LayoutOf(c.schedule, 2).chunks == 2;
    const std::vector<int> expected = chunks ? std::vector<int>{1, 1, 1, 1} : std::vector<int>{2, 2};
    EXPECT_EQ(c.partition, expected) << c.ToString();
    // The first stage's forwards run twice when it discards its activations (under zb-v both
    // of rank 1's chunks do).
    const bool discards = c.recompute || c.schedule == ScheduleKind::kVaruna;
    EXPECT_DOUBLE_EQ(o.bound, 4 * 2 * ((discards ? 2 : 1) * f + b)) << c.ToString();
  }
}

// Interleaved is tried with v = 2, 3 and 4 chunks per rank where the segments give each chunk
// one (v P ranges), each balanced; the other schedules in their one layout.
TEST(EnumerateShapeOptions, InterleavedTriesEveryChunkCountTheSegmentsAllow) {
  for (const auto& [segments, counts] :
       std::vector<std::pair<int, std::set<size_t>>>{{8, {4, 6, 8}}, {7, {4, 6}}, {5, {4}}, {3, {}}}) {
    SCOPED_TRACE(std::to_string(segments) + " segments");
    const Profile p = Uniform(segments, 0.01, 0.02);
    PlanRequest request;
    request.profile = &p;
    request.global_batch = 8;
    request.machines = {{"m0", 2}};
    request.stages = 2;
    request.chunk_size = 2;  // 4 micro-batches: a multiple of P
    std::set<size_t> interleaved, zb_v;
    for (const ShapeOption& o : EnumerateShapeOptions(request, 2)) {
      const Candidate& c = o.candidate;
      if (c.replicas != 1) continue;
      if (c.schedule == ScheduleKind::kInterleaved) interleaved.insert(c.partition.size());
      if (c.schedule == ScheduleKind::kZbV) zb_v.insert(c.partition.size());
      if (c.schedule == ScheduleKind::k1F1B) {
        EXPECT_EQ(c.partition.size(), 2u) << c.ToString();
      }
      const int most = *std::max_element(c.partition.begin(), c.partition.end());
      const int least = *std::min_element(c.partition.begin(), c.partition.end());
      EXPECT_LE(most - least, 1) << c.ToString();
    }
    EXPECT_EQ(interleaved, counts);
    EXPECT_EQ(zb_v, segments >= 4 ? std::set<size_t>{4} : std::set<size_t>{});
  }
}

}  // namespace
}  // namespace mitra::planner::detail
