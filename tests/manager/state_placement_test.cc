// Which slot each rank of the next generation takes (state_placement.h): the assignment against
// every permutation, the segments a plan's ranks hold, and the slots a change of P gives.
#include "manager/state_placement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "tests/manager/machine_lists.h"

namespace mitra::manager {
namespace {

using testing::List;

int64_t Total(const std::vector<std::vector<int64_t>>& score, const std::vector<int>& column_of) {
  int64_t sum = 0;
  for (size_t i = 0; i < column_of.size(); ++i) sum += score[i][column_of[i]];
  return sum;
}

int64_t BestByEveryPermutation(const std::vector<std::vector<int64_t>>& score) {
  std::vector<int> order(score.size());
  std::iota(order.begin(), order.end(), 0);
  int64_t best = Total(score, order);
  while (std::next_permutation(order.begin(), order.end())) best = std::max(best, Total(score, order));
  return best;
}

TEST(BestAssignment, FindsTheLargestSumOfEveryPermutation) {
  std::mt19937 random(2026);
  for (int trial = 0; trial < 400; ++trial) {
    const int n = 1 + trial % 7;
    // Small values make ties common; large ones, negative ones too, test the potentials.
    const int64_t range = trial % 2 ? 4 : 1'000'000'000'000;
    std::uniform_int_distribution<int64_t> value(trial % 3 ? 0 : -range, range);
    std::vector<std::vector<int64_t>> score(n, std::vector<int64_t>(n));
    for (auto& row : score) {
      for (int64_t& v : row) v = value(random);
    }
    const std::vector<int> column_of = BestAssignment(score);
    std::vector<int> sorted = column_of;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int> every(n);
    std::iota(every.begin(), every.end(), 0);
    ASSERT_EQ(sorted, every) << "not a permutation, n = " << n;
    ASSERT_EQ(Total(score, column_of), BestByEveryPermutation(score)) << "trial " << trial;
  }
}

TEST(BestAssignment, IsNotTheGreedyChoice) {
  // Greedy takes the 5 and is left with 0; the best is 4 + 4.
  const std::vector<std::vector<int64_t>> score = {{5, 4}, {4, 0}};
  EXPECT_EQ(BestAssignment(score), (std::vector<int>{1, 0}));
}

// `stages` x 1 on one machine of `slots` slots, 1F1B, partition `partition`.
planner::GridPlan Pipeline(int stages, const std::string& partition, int segments, int slots) {
  planner::GridRequest request;
  request.slots_per_machine = {slots};
  request.stages = stages;
  request.segments = segments;
  request.global_batch = 16;
  request.replicas = 1;
  Result<planner::GridPlan> plan = planner::PlanGrid(request);
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  if (!plan.ok()) return {};
  plan->schedule = planner::ScheduleKind::k1F1B;
  plan->partition = partition;
  return *plan;
}

ParkedWorker Holder(const std::string& machine, int local_rank, int first, int end) {
  return ParkedWorker{0, local_rank, machine, local_rank, HeldSegments{0, first, end}};
}

std::vector<int> LocalRanks(const planner::GridPlan& plan) {
  std::vector<int> out;
  for (const planner::RankPlacement& p : plan.ranks) out.push_back(p.local_rank);
  return out;
}

// Each pipeline cut its own way: each rank holds its replica's stage's range.
TEST(SegmentsByRank, AreTheirOwnPipelinesRangesWhereEachIsCutItsWay) {
  planner::GridRequest request;
  request.slots_per_machine = {4};
  request.stages = 2;
  request.replicas = 2;
  request.segments = 4;
  request.global_batch = 16;
  Result<planner::GridPlan> plan = planner::PlanGrid(request);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  plan->schedule = planner::ScheduleKind::k1F1B;
  plan->partition = "1,3/3,1";
  const auto held = SegmentsByRank(*plan, 4);
  ASSERT_TRUE(held.has_value());
  std::vector<std::pair<int, int>> ranges;
  for (const planner::RankPlacement& p : plan->ranks) {
    ranges.emplace_back((*held)[p.rank].first, (*held)[p.rank].end);
    EXPECT_EQ(ranges.back(), p.replica == 0 ? (p.stage == 0 ? std::pair{0, 1} : std::pair{1, 4})
                                            : (p.stage == 0 ? std::pair{0, 3} : std::pair{3, 4}))
        << "rank " << p.rank;
  }
  EXPECT_EQ(planner::ReplicaPartition("1,3/3,1", 1), "3,1");
  EXPECT_EQ(planner::ReplicaPartition("2,2", 1), "2,2");
  EXPECT_EQ(planner::ReplicaPartition("1,3/3,1", 2), "");
  plan->partition = "1,3";  // a replica without its counts: not known
  plan->partition += "/";
  EXPECT_FALSE(SegmentsByRank(*plan, 4).has_value());
}

TEST(SegmentsByRank, AreTheStagesRangesOfOneChunkSchedulesOnly) {
  planner::GridPlan plan = Pipeline(4, "2,2,3,3", 10, 4);
  const auto held = SegmentsByRank(plan, 10);
  ASSERT_TRUE(held.has_value());
  ASSERT_EQ(held->size(), 4u);
  EXPECT_EQ((*held)[2].first, 4);
  EXPECT_EQ((*held)[2].end, 7);
  EXPECT_FALSE(SegmentsByRank(plan, 11).has_value());  // the counts add up to 10
  plan.partition = "2,2,x,3";
  EXPECT_FALSE(SegmentsByRank(plan, 10).has_value());
  plan.partition = "";  // the program's own partition
  EXPECT_FALSE(SegmentsByRank(plan, 10).has_value());
  plan = Pipeline(2, "1,1,1,1", 4, 2);
  plan.schedule = planner::ScheduleKind::kInterleaved;  // each rank holds two ranges
  EXPECT_FALSE(SegmentsByRank(plan, 4).has_value());
  plan.schedule.reset();
  plan.partition = "2,2";
  EXPECT_FALSE(SegmentsByRank(plan, 4).has_value());
}

// 2 x 1 (0-4 | 5-9) -> 4 x 1 (0-1 | 2-3 | 4-6 | 7-9) on one machine: the worker of segments
// 5-9 keeps three of them as stage 3, none as stage 1 (the slot the grid's order gives it).
TEST(PlaceToKeepState, AChangeOfPGivesEachWorkersSlotTheRankThatKeepsTheMost) {
  const std::vector<Machine> machines = List("a slots=4\n").machines;
  planner::GridPlan plan = Pipeline(4, "2,2,3,3", 10, 4);
  ASSERT_EQ(LocalRanks(plan), (std::vector<int>{0, 1, 2, 3}));
  PlaceToKeepState({Holder("a", 0, 0, 5), Holder("a", 1, 5, 10)}, 10, {}, machines, &plan);
  // Rank 0 keeps slot 0 (2 segments kept, as rank 1 would), rank 3 takes slot 1; rank 2 keeps
  // its own slot 2 and rank 1 takes the last.
  EXPECT_EQ(LocalRanks(plan), (std::vector<int>{0, 3, 2, 1}));
}

TEST(PlaceToKeepState, WeighsSegmentsByTheStateTheyCarry) {
  // One holder, of segments 0-2 on slot 1; stage 0 is segment 0, stage 1 segments 1-3.
  const std::vector<Machine> machines = List("a slots=2\n").machines;
  planner::GridPlan plan = Pipeline(2, "1,3", 4, 2);
  PlaceToKeepState({Holder("a", 1, 0, 3)}, 4, {}, machines, &plan);
  EXPECT_EQ(LocalRanks(plan), (std::vector<int>{0, 1}));  // rank 1 keeps two segments there
  plan = Pipeline(2, "1,3", 4, 2);
  PlaceToKeepState({Holder("a", 1, 0, 3)}, 4, {1000, 1, 1, 1}, machines, &plan);
  EXPECT_EQ(LocalRanks(plan), (std::vector<int>{1, 0}));  // rank 0 keeps the embedding
  plan = Pipeline(2, "1,3", 4, 2);
  PlaceToKeepState({Holder("a", 1, 0, 3)}, 4, {1000, 1}, machines, &plan);  // not one a segment
  EXPECT_EQ(LocalRanks(plan), (std::vector<int>{0, 1}));
}

TEST(PlaceToKeepState, AShapeThatDoesNotChangeKeepsEveryRankOnItsSlot) {
  const std::vector<Machine> machines = List("a slots=2\nb slots=2\n").machines;
  planner::GridRequest request;
  request.slots_per_machine = {2, 2};
  request.stages = 2;
  request.segments = 4;
  request.global_batch = 16;
  Result<planner::GridPlan> plan = planner::PlanGrid(request);  // 2 x 2: a replica a machine
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  plan->schedule = planner::ScheduleKind::k1F1B;
  plan->partition = "2,2";
  const std::vector<int> before = LocalRanks(*plan);
  // Every replica of a stage holds the same segments: the plan's own slot breaks the tie.
  PlaceToKeepState({Holder("a", 0, 0, 2), Holder("a", 1, 2, 4), Holder("b", 0, 0, 2),
                    Holder("b", 1, 2, 4)},
                   4, {}, machines, &*plan);
  EXPECT_EQ(LocalRanks(*plan), before);
}

TEST(PlaceToKeepState, LeavesAPlanWhoseRanksHoldChunksAsItIs) {
  const std::vector<Machine> machines = List("a slots=2\n").machines;
  planner::GridPlan plan = Pipeline(2, "1,1,1,1", 4, 2);
  plan.schedule = planner::ScheduleKind::kZbV;
  PlaceToKeepState({Holder("a", 1, 0, 1)}, 4, {}, machines, &plan);
  EXPECT_EQ(LocalRanks(plan), (std::vector<int>{0, 1}));
}

}  // namespace
}  // namespace mitra::manager
