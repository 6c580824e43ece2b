#include "planner/grid.h"

#include <gtest/gtest.h>

namespace mitra::planner {
namespace {

GridRequest Request(std::vector<int> slots, int stages, int64_t batch, int chunk = 0,
                    int segments = 8) {
  GridRequest r;
  r.slots_per_machine = std::move(slots);
  r.stages = stages;
  r.segments = segments;
  r.global_batch = batch;
  r.chunk_size = chunk;
  return r;
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(Grid, DefaultChunkSize) {
  EXPECT_EQ(DefaultChunkSize(32, 1, 1, false), 32);  // no pipeline: one micro-batch
  EXPECT_EQ(DefaultChunkSize(32, 1, 3, false), 11);  // 11, 11, 10
  EXPECT_EQ(DefaultChunkSize(32, 2, 1, false), 4);   // 8 micro-batches = 4 P
  EXPECT_EQ(DefaultChunkSize(5, 2, 1, false), 1);    // never below 1
  EXPECT_EQ(DefaultChunkSize(64, 4, 1, false), 4);
  // Kept for the job: room to grow to 4 times the replicas even without a pipeline.
  EXPECT_EQ(DefaultChunkSize(32, 1, 1, true), 8);
  EXPECT_EQ(DefaultChunkSize(64, 1, 2, true), 8);
}

TEST(Grid, PlansAFullGrid) {
  Result<GridPlan> plan = PlanGrid(Request({4}, 2, 10));
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->stages, 2);
  EXPECT_EQ(plan->replicas, 2);
  EXPECT_EQ(plan->world_size(), 4);
  EXPECT_EQ(plan->idle_slots, 0);
  EXPECT_EQ(plan->stage_map.ToString(), "0,2;1,3;");
  EXPECT_EQ(plan->chunk_size, 1);  // 10 / (2 replicas * 4 * 2) -> 1
  ASSERT_EQ(plan->ranks.size(), 4u);
  EXPECT_EQ(plan->ranks[3].stage, 1);
  EXPECT_EQ(plan->ranks[3].replica, 1);
}

TEST(Grid, LeavesLeftoverSlotsIdleAndFillsMachinesInOrder) {
  Result<GridPlan> plan = PlanGrid(Request({3, 2}, 2, 7));
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->replicas, 2);
  EXPECT_EQ(plan->idle_slots, 1);
  EXPECT_EQ(plan->ranks[2].machine, 0);
  EXPECT_EQ(plan->ranks[2].local_rank, 2);
  EXPECT_EQ(plan->ranks[3].machine, 1);
  EXPECT_EQ(plan->ranks[3].local_rank, 0);
}

TEST(Grid, RejectsMoreStagesThanSegments) {
  Result<GridPlan> plan = PlanGrid(Request({8}, 4, 64, 0, /*segments=*/3));
  ASSERT_FALSE(plan.ok());
  EXPECT_TRUE(Contains(plan.status().message(), "--nstages 4 is more than the 3 segments"));
  EXPECT_TRUE(Contains(plan.status().message(), "use --nstages 3 or fewer"));
}

TEST(Grid, RejectsMoreStagesThanSlots) {
  Result<GridPlan> plan = PlanGrid(Request({1, 1}, 3, 64));
  ASSERT_FALSE(plan.ok());
  EXPECT_TRUE(Contains(plan.status().message(),
                       "--nstages 3 needs at least 3 slots but the machine list has 2"));
}

TEST(Grid, RejectsABatchSmallerThanTheReplicas) {
  Result<GridPlan> plan = PlanGrid(Request({4}, 1, 3));
  ASSERT_FALSE(plan.ok());
  EXPECT_TRUE(Contains(plan.status().message(), "--batch-size 3 is smaller than the 4 replicas"));
  EXPECT_TRUE(Contains(plan.status().message(), "use --batch-size 4 or more"));
}

TEST(Grid, ReplicasTakeWholeMicroBatchesSoAFixedChunkLimitsThem) {
  // 7 samples in micro-batches of 4: 2 micro-batches, so 2 of the 3 slots train.
  Result<GridPlan> plan = PlanGrid(Request({3}, 1, 7, /*chunk=*/4));
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->replicas, 2);
  EXPECT_EQ(plan->idle_slots, 1);
  EXPECT_TRUE(Contains(plan->idle_reason, "a batch of 7 in micro-batches of 4 feeds at most 2"));
  EXPECT_TRUE(PlanGrid(Request({3}, 1, 7, 3))->idle_reason.empty());
}

TEST(Grid, RejectsAChunkLargerThanTheBatch) {
  Result<GridPlan> plan = PlanGrid(Request({2}, 1, 7, /*chunk=*/8));
  ASSERT_FALSE(plan.ok());
  EXPECT_TRUE(Contains(plan.status().message(),
                       "--chunk-size 8 is larger than --batch-size 7; use --chunk-size 7"));
}

}  // namespace
}  // namespace mitra::planner
