// PipelinePartitions: which ranks reduce which segments' gradients when each pipeline cuts the
// model its own way.
#include "worker/step/pipeline_partitions.h"

#include <gtest/gtest.h>

namespace mitra::worker {
namespace {

PipelinePartitions TwoByTwo(std::vector<int> first, std::vector<int> second) {
  return PipelinePartitions({cutpoint::Partition{first}, cutpoint::Partition{second}},
                            planner::ChunkLayout{2, 1, false}, contract::StageMap::Default(2, 2));
}

std::vector<std::pair<std::vector<int>, std::vector<int>>> Groups(const PipelinePartitions& p,
                                                                 int rank) {
  std::vector<std::pair<std::vector<int>, std::vector<int>>> out;
  for (const ReductionGroup& g : p.GroupsOf(rank)) out.emplace_back(g.ranks, g.segments);
  return out;
}

using GroupList = std::vector<std::pair<std::vector<int>, std::vector<int>>>;

// 2 x 2, stage s of replica d on rank s + 2d. "1,3/3,1": segment 0 on ranks 0 and 2, segments
// 1-2 on ranks 1 and 2, segment 3 on ranks 1 and 3.
TEST(PipelinePartitions, EachSegmentIsReducedByItsHolderInEveryReplica) {
  const PipelinePartitions p = TwoByTwo({1, 3}, {3, 1});
  EXPECT_FALSE(p.Alike());
  EXPECT_EQ(p.ToString(), "1,3/3,1");
  EXPECT_EQ(p.SegmentsOf(2), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(Groups(p, 0), (GroupList{{{0, 2}, {0}}}));
  EXPECT_EQ(Groups(p, 1), (GroupList{{{1, 2}, {1, 2}}, {{1, 3}, {3}}}));
  EXPECT_EQ(Groups(p, 2), (GroupList{{{0, 2}, {0}}, {{1, 2}, {1, 2}}}));
  EXPECT_EQ(Groups(p, 3), (GroupList{{{1, 3}, {3}}}));
}

// Cut alike, the groups are the stages' replicas, one a rank.
TEST(PipelinePartitions, AlikeTheGroupsAreTheStages) {
  const PipelinePartitions p = TwoByTwo({2, 2}, {2, 2});
  EXPECT_TRUE(p.Alike());
  EXPECT_EQ(p.ToString(), "2,2");
  EXPECT_EQ(Groups(p, 1), (GroupList{{{1, 3}, {2, 3}}}));
}

// Under zb-v each rank runs two chunks (virtual stages 0..3, the V's second half reversed):
// segments that one pair of ranks holds in separate chunks form one group.
TEST(PipelinePartitions, ChunksOfOneRankHeldByTheSamePeersAreOneGroup) {
  const PipelinePartitions p(
      {cutpoint::Partition{{1, 1, 1, 1}}, cutpoint::Partition{{1, 1, 1, 1}}},
      planner::ChunkLayout{2, 2, true}, contract::StageMap::Default(2, 2));
  EXPECT_EQ(p.SegmentsOf(0), (std::vector<int>{0, 3}));
  EXPECT_EQ(Groups(p, 0), (GroupList{{{0, 2}, {0, 3}}}));
  // Five segments cut 2,1,1,1 and 1,1,1,2: rank 0 holds segments 0-1 and 4, and reduces 0 and 4
  // with rank 2 (whose V holds them both), 1 with rank 3.
  const PipelinePartitions uneven(
      {cutpoint::Partition{{2, 1, 1, 1}}, cutpoint::Partition{{1, 1, 1, 2}}},
      planner::ChunkLayout{2, 2, true}, contract::StageMap::Default(2, 2));
  EXPECT_EQ(uneven.SegmentsOf(0), (std::vector<int>{0, 1, 4}));
  EXPECT_EQ(Groups(uneven, 0), (GroupList{{{0, 2}, {0, 4}}, {{0, 3}, {1}}}));
  EXPECT_EQ(Groups(uneven, 3), (GroupList{{{0, 3}, {1}}, {{1, 3}, {2}}}));
}

}  // namespace
}  // namespace mitra::worker
