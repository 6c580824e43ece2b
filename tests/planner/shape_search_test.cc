// How the planner simulates the shapes it considers, on its own.
#include "planner/shape_search.h"

#include <gtest/gtest.h>

#include "tests/planner/uniform_profile.h"

namespace mitra::planner::detail {
namespace {

TEST(KthBest, InfiniteUntilKeepTimesWereFoundOrForNoKeep) {
  KthBest second(2);
  EXPECT_EQ(second.Get(), std::numeric_limits<double>::infinity());
  second.Add(3);
  EXPECT_EQ(second.Get(), std::numeric_limits<double>::infinity());
  second.Add(1);
  EXPECT_EQ(second.Get(), 3);
  second.Add(2);
  EXPECT_EQ(second.Get(), 2);
  KthBest all(0);
  all.Add(1);
  EXPECT_EQ(all.Get(), std::numeric_limits<double>::infinity());
}

TEST(FitsMemory, EachMachineHoldsItsRanksTogetherAndNoFigureHoldsAny) {
  const std::vector<int64_t> capacity = {100, 0};  // machine 1 reports no memory
  EXPECT_TRUE(FitsMemory(capacity, {0, 0, 1}, {50, 50, 1000000}));
  EXPECT_FALSE(FitsMemory(capacity, {0, 0, 1}, {50, 51, 0}));
}

TEST(SearchShapes, RecomputesOnlyAShapeThatDoesNotFitWithoutAndStopsAtTheKeepthBest) {
  Profile p = Uniform(2, 0.01, 0.02);
  PlanRequest request;
  request.profile = &p;
  request.global_batch = 8;
  request.machines = {{"m0", 1}, {"m1", 1}};  // a stage on each (m1 costed as m0)
  request.stages = 2;
  request.chunk_size = 1;
  request.keep = 0;
  const std::vector<ShapeOption> options = EnumerateShapeOptions(request, 2);
  // Everything fits: no shape with recomputation is simulated.
  Result<PlanResult> roomy = SearchShapes(request, options, 2);
  ASSERT_TRUE(roomy.ok()) << roomy.status().message();
  EXPECT_EQ(roomy->simulated, 4);  // 1F1B, GPipe, Varuna, ZB-H1
  for (const PlannedShape& s : roomy->candidates) EXPECT_FALSE(s.candidate.recompute);
  // Room for a stage's parameters and gradients (800 bytes) and one graph of 1000 and a few
  // inputs of 64, not for the 2 graphs 1F1B keeps on the first stage nor GPipe's 8, nor for
  // ZB-H1's with or without recomputation (a graph counts as held until its W).
  p.machines[0].memory_bytes = 2400;
  Result<PlanResult> tight = SearchShapes(request, options, 2);
  ASSERT_TRUE(tight.ok()) << tight.status().message();
  EXPECT_EQ(tight->too_big, 4);
  ASSERT_EQ(tight->candidates.size(), 3u);
  for (const PlannedShape& s : tight->candidates) {
    EXPECT_TRUE(s.candidate.recompute || s.candidate.schedule == ScheduleKind::kVaruna)
        << s.candidate.ToString();
  }
  // Keep 1: 1F1B takes 9 (f + b); GPipe's and ZB-H1's bound, 8 (f + b), may beat it, the
  // others' bound, 8 (2 f + b) with the first stage's forwards recomputed, cannot.
  p.machines[0].memory_bytes = 0;
  request.keep = 1;
  Result<PlanResult> first = SearchShapes(request, options, 2);
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_EQ(first->simulated, 3);
}

}  // namespace
}  // namespace mitra::planner::detail
