// The straggler rule, driven by hand: compute times in, findings out.
#include "manager/stragglers.h"

#include <gtest/gtest.h>

#include <optional>

namespace mitra::manager {
namespace {

// Two stages of three replicas: stage s holds ranks s, s+2, s+4.
StragglerDetector TwoByThree() { return StragglerDetector({1.3, 20}, {0, 1, 0, 1, 0, 1}); }

TEST(Stragglers, ARankSlowerThanItsStagePeersForTwentyStepsIsReportedOnce) {
  StragglerDetector detector = TwoByThree();
  std::optional<Straggler> found;
  for (int beat = 0; beat < 10 && !found; ++beat) {  // heartbeats of 2 steps each
    EXPECT_FALSE(detector.Observe(0, 2, 0.10));
    EXPECT_FALSE(detector.Observe(2, 2, 0.12));
    found = detector.Observe(4, 2, 0.20);
    if (beat < 9) {
      EXPECT_FALSE(found) << beat;
    }
  }
  ASSERT_TRUE(found);
  EXPECT_EQ(found->rank, 4);
  EXPECT_EQ(found->stage, 0);
  EXPECT_DOUBLE_EQ(found->peer_median_s, 0.11);
  EXPECT_NEAR(found->ratio, 0.20 / 0.11, 1e-9);
  EXPECT_EQ(found->steps, 20);
  EXPECT_FALSE(detector.Observe(4, 2, 0.20));  // once per generation
}

TEST(Stragglers, ASlowSpellShorterThanTwentyStepsIsForgotten) {
  StragglerDetector detector = TwoByThree();
  for (int beat = 0; beat < 30; ++beat) {
    detector.Observe(0, 2, 0.10);
    detector.Observe(2, 2, 0.10);
    // 18 slow steps, then one normal heartbeat: the count starts again.
    EXPECT_FALSE(detector.Observe(4, 2, beat % 10 == 9 ? 0.10 : 0.5)) << beat;
  }
}

TEST(Stragglers, OnlyPeersOfTheSameStageCount) {
  // Stage 1 is slower by design (more work): its ranks are not stragglers against stage 0.
  StragglerDetector detector = TwoByThree();
  for (int beat = 0; beat < 20; ++beat) {
    for (int rank = 0; rank < 6; ++rank) {
      EXPECT_FALSE(detector.Observe(rank, 2, rank % 2 == 1 ? 0.5 : 0.1)) << rank;
    }
  }
}

TEST(Stragglers, JustBelowTheRatioIsNoStraggler) {
  StragglerDetector detector({1.3, 20}, {0, 0});
  for (int beat = 0; beat < 40; ++beat) {
    detector.Observe(0, 1, 0.100);
    EXPECT_FALSE(detector.Observe(1, 1, 0.129));
  }
  std::optional<Straggler> found;
  for (int beat = 0; beat < 20; ++beat) {
    detector.Observe(0, 1, 0.100);
    found = detector.Observe(1, 1, 0.130);
  }
  EXPECT_TRUE(found);
}

// Uneven shares (3 and 1 micro-batches): the replica with three takes three times the compute
// and is no straggler; per micro-batch, one that takes 1.5 times its peer's is.
TEST(Stragglers, UnevenSharesAreJudgedPerMicroBatch) {
  StragglerDetector detector({1.3, 20}, {0, 0}, {3, 1});
  for (int beat = 0; beat < 30; ++beat) {
    EXPECT_FALSE(detector.Observe(1, 1, 0.100));
    EXPECT_FALSE(detector.Observe(0, 1, 0.300));
  }
  std::optional<Straggler> found;
  for (int beat = 0; beat < 20 && !found; ++beat) {
    detector.Observe(1, 1, 0.100);
    found = detector.Observe(0, 1, 0.450);
  }
  ASSERT_TRUE(found);
  EXPECT_DOUBLE_EQ(found->compute_s, 0.450);
  EXPECT_DOUBLE_EQ(found->peer_median_s, 0.300);
  EXPECT_DOUBLE_EQ(found->ratio, 1.5);
}

// A plan from a profile expects rank 0's machine to take twice rank 1's compute for the same
// share: at that pace it is no straggler; slower than planned by 1.5 times, it is.
TEST(Stragglers, ARankIsJudgedAgainstWhatThePlanExpectsOfItsMachine) {
  StragglerDetector detector({1.3, 20}, {0, 0}, {0.2, 0.1});
  for (int beat = 0; beat < 30; ++beat) {
    EXPECT_FALSE(detector.Observe(1, 1, 0.100));
    EXPECT_FALSE(detector.Observe(0, 1, 0.200));
  }
  std::optional<Straggler> found;
  for (int beat = 0; beat < 20 && !found; ++beat) {
    detector.Observe(1, 1, 0.100);
    found = detector.Observe(0, 1, 0.300);
  }
  ASSERT_TRUE(found);
  EXPECT_DOUBLE_EQ(found->peer_median_s, 0.200);
  EXPECT_DOUBLE_EQ(found->ratio, 1.5);
}

TEST(Stragglers, AStageWithoutPeersAndUnknownRanksAreNeverJudged) {
  StragglerDetector detector({1.3, 20}, {0, 1});  // 2 stages x 1 replica
  for (int beat = 0; beat < 30; ++beat) {
    EXPECT_FALSE(detector.Observe(0, 1, 0.1));
    EXPECT_FALSE(detector.Observe(1, 1, 5.0));
  }
  EXPECT_FALSE(detector.Observe(7, 30, 5.0));
  EXPECT_FALSE(detector.Observe(-1, 30, 5.0));
  EXPECT_EQ(detector.StageOf(1), 1);
  EXPECT_EQ(detector.StageOf(2), -1);
}

}  // namespace
}  // namespace mitra::manager
