// PlanResume: where each rank of a new generation takes the state of the step it resumes from.
// Pure: the same inputs give every rank the same plan, which is what keeps the exchange free of
// deadlocks and the ranks in agreement. The exchange itself runs in the elastic runs
// (elastic_run_test.cc), against real processes.
#include "worker/state_exchange.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace mitra::worker {
namespace {

using Needs = std::vector<std::pair<int, int>>;

TEST(PlanResume, RanksThatHoldTheirNewSegmentsKeepThemAndNothingMoves) {
  // 2 x 2 -> 2 x 1 with the same partition: ranks 0 and 1 hold stages 0 and 1.
  const std::vector<Holding> held{{10, 0, 2}, {10, 2, 4}};
  const ResumePlan plan = PlanResume(held, Needs{{0, 2}, {2, 4}}, 10);
  EXPECT_TRUE(plan.transfers.empty());
  EXPECT_TRUE(plan.from_checkpoint.empty());
  EXPECT_EQ(plan.rank_sources, (std::vector<StateSource>{StateSource::kKept, StateSource::kKept}));
  EXPECT_EQ(plan.trainer_donor, 0);
}

TEST(PlanResume, NewRanksReceiveTheirStageFromAHolderAndTheSendingIsShared) {
  // 2 x 1 -> 2 x 2: ranks 2 and 3 are new processes.
  const std::vector<Holding> held{{10, 0, 2}, {10, 2, 4}, {}, {}};
  const ResumePlan plan = PlanResume(held, Needs{{0, 2}, {2, 4}, {0, 2}, {2, 4}}, 10);
  ASSERT_EQ(plan.transfers.size(), 4u);
  for (const SegmentTransfer& t : plan.transfers) {
    EXPECT_EQ(t.from, t.segment < 2 ? 0 : 1) << t.segment;
    EXPECT_EQ(t.to, t.segment < 2 ? 2 : 3) << t.segment;
  }
  EXPECT_EQ(plan.rank_sources[2], StateSource::kPeer);
  EXPECT_EQ(plan.rank_sources[0], StateSource::kKept);

  // Two holders of every segment (2 x 2 -> 1 x 5): the sending is spread over the four holders,
  // none sends more than one segment more than another.
  const std::vector<Holding> two{{10, 0, 2}, {10, 2, 4}, {10, 0, 2}, {10, 2, 4}, {}};
  const ResumePlan shared = PlanResume(two, Needs{{0, 4}, {0, 4}, {0, 4}, {0, 4}, {0, 4}}, 10);
  std::vector<int> sent(5, 0);
  for (const SegmentTransfer& t : shared.transfers) ++sent[t.from];
  EXPECT_EQ(sent[4], 0);
  const auto [least, most] = std::minmax_element(sent.begin(), sent.begin() + 4);
  EXPECT_LE(*most - *least, 1);
}

TEST(PlanResume, AChangeOfStagesMovesOnlyTheSegmentsThatChangeOwner) {
  // 2 stages [0,2) [2,4) -> 4 stages of one segment, the two old ranks kept as ranks 0 and 2.
  const std::vector<Holding> held{{7, 0, 2}, {}, {7, 2, 4}, {}};
  const ResumePlan plan = PlanResume(held, Needs{{0, 1}, {1, 2}, {2, 3}, {3, 4}}, 7);
  ASSERT_EQ(plan.transfers.size(), 2u);
  EXPECT_EQ(plan.transfers[0].segment, 1);
  EXPECT_EQ(plan.transfers[0].from, 0);
  EXPECT_EQ(plan.transfers[0].to, 1);
  EXPECT_EQ(plan.transfers[1].segment, 3);
  EXPECT_EQ(plan.transfers[1].from, 2);
  EXPECT_EQ(plan.transfers[1].to, 3);
}

TEST(PlanResume, StateOfAnotherStepIsNeverUsed) {
  // Rank 1 holds step 9 (a failure struck before its all-reduce); the job resumes at 10: its
  // stage comes from the checkpoint, and so does nobody's trainer state when nobody holds 10.
  const std::vector<Holding> held{{10, 0, 2}, {9, 2, 4}};
  const ResumePlan plan = PlanResume(held, Needs{{0, 2}, {2, 4}}, 10);
  EXPECT_TRUE(plan.transfers.empty());
  EXPECT_EQ(plan.from_checkpoint, (std::vector<std::pair<int, int>>{{1, 2}, {1, 3}}));
  EXPECT_EQ(plan.rank_sources[1], StateSource::kCheckpoint);
  EXPECT_EQ(plan.trainer_donor, 0);

  const ResumePlan none = PlanResume({{9, 0, 2}, {9, 2, 4}}, Needs{{0, 2}, {2, 4}}, 10);
  EXPECT_EQ(none.trainer_donor, -1);
  EXPECT_EQ(none.from_checkpoint.size(), 4u);
}

}  // namespace
}  // namespace mitra::worker
