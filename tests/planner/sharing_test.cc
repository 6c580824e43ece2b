// Sharing: the speed of k processes computing at once, from every process's rate, and the
// figures no machine can produce.
#include "planner/sharing.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "planner/shape_policy.h"
#include "tests/planner/uniform_profile.h"

namespace mitra::planner {
namespace {

TEST(Sharing, TheSpeedIsTheMedianRoundsMeanOverTheRateAlone) {
  // Two processes at 10 iterations/s alone: one got a core to itself in round 1.
  const std::vector<std::vector<double>> rounds{{10, 4}, {6, 5}, {5, 5}};
  EXPECT_DOUBLE_EQ(SharedSpeed(rounds, 10), 0.55);  // rounds 0.7, 0.55, 0.5
  EXPECT_DOUBLE_EQ(SharedSpeed({{3, 3}, {5, 5}}, 10), 0.4);
  EXPECT_EQ(SharedSpeed({}, 10), 0);
}

TEST(Sharing, FiguresNoMachineCanProduceAreRefusedNamingWhy) {
  // What one run of `mitra profile` on a 2-CPU machine printed, from the leader's rate alone:
  // three processes at 0.974 each is 2.9 processes' work on 2 CPUs.
  EXPECT_EQ(ImpossibleSharing(0.94, 2, 2, 1.0), "");
  EXPECT_EQ(ImpossibleSharing(0.974, 3, 2, 0.94),
            "3 processes at 0.97 each do 2.92 processes' work at once on 2 CPUs");
  EXPECT_NE(ImpossibleSharing(1.3, 1, 2, 1.0).find("faster than one alone"), std::string::npos);
  EXPECT_NE(ImpossibleSharing(0.8, 3, 8, 0.5).find("than with 2 computing (0.50)"),
            std::string::npos);
  EXPECT_NE(ImpossibleSharing(0, 2, 2, 1).find("no process"), std::string::npos);
  // Within the tolerance: timing noise, not physics.
  EXPECT_EQ(ImpossibleSharing(0.54, 4, 2, 0.55), "");
  EXPECT_EQ(ImpossibleSharing(1.05, 1, 2, 1.0), "");
  // The other run's figures are all possible.
  EXPECT_EQ(ImpossibleSharing(0.516, 2, 2, 1.0), "");
  EXPECT_EQ(ImpossibleSharing(0.322, 3, 2, 0.516), "");
  EXPECT_EQ(ImpossibleSharing(0.255, 4, 2, 0.322), "");
}

TEST(Sharing, TheBoundUsedAfterRepeatedImpossibleFiguresIsTheFastestPossible) {
  EXPECT_DOUBLE_EQ(BoundedSharing(3, 2, 0.94), 2.0 / 3);
  EXPECT_DOUBLE_EQ(BoundedSharing(2, 8, 0.9), 0.9);
  EXPECT_DOUBLE_EQ(BoundedSharing(1, 2, 1), 1);
  EXPECT_DOUBLE_EQ(BoundedSharing(4, 0, 0.7), 0.7);  // CPUs unknown
}

// A running job that measured its steps slower than predicted corrects the speed the next plans
// take for that machine and load: two processes that share the machine well are planned as two
// replicas; measured at half that speed, the plan no longer takes them.
TEST(Sharing, TrainingStepsOfTheRuntimeMoveTheSpeedsTheWorkloadMeasured) {
  // A 2-CPU machine whose workload said 1.016 with two computing, where the runtime's steps
  // took 1.15 times their cost alone (1.016 / 1.15 = 0.883).
  const std::vector<double> two = CalibratedSharing({1.0, 1.016}, 0.883, 2);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_DOUBLE_EQ(two[0], 1.0);
  EXPECT_DOUBLE_EQ(two[1], 0.883);
  // Four slots: alone stays 1, all four take the measured figure, the ones between move by the
  // factor's root (0.8^(1/3) and 0.8^(2/3)).
  const std::vector<double> four = CalibratedSharing({1.0, 0.9, 0.6, 0.5}, 0.4, 8);
  ASSERT_EQ(four.size(), 4u);
  EXPECT_DOUBLE_EQ(four[0], 1.0);
  EXPECT_NEAR(four[1], 0.9 * std::pow(0.8, 1.0 / 3), 1e-12);
  EXPECT_NEAR(four[2], 0.6 * std::pow(0.8, 2.0 / 3), 1e-12);
  EXPECT_NEAR(four[3], 0.4, 1e-12);
}

TEST(Sharing, ACalibrationStaysWithinWhatTheCoresAllow) {
  // Runtime steps faster than the workload: the speeds move up, but never past one process
  // alone, the figure with one fewer computing, or the cores' share.
  const std::vector<double> up = CalibratedSharing({1.0, 0.95, 0.6}, 0.9, 2);
  EXPECT_DOUBLE_EQ(up[1], 1.0);        // 0.95 * 1.5^(1/2) = 1.16: no faster than alone
  EXPECT_NEAR(up[2], 2.0 / 3, 1e-12);  // 3 processes on 2 CPUs: at most 2/3 each
  // Nothing to calibrate: one slot, or no measurement.
  EXPECT_EQ(CalibratedSharing({1.0}, 0.5, 2), std::vector<double>{1.0});
  EXPECT_EQ(CalibratedSharing({1.0, 0.9}, 0, 2), (std::vector<double>{1.0, 0.9}));
  EXPECT_EQ(CalibratedSharing({1.0, 0.9}, std::nan(""), 2), (std::vector<double>{1.0, 0.9}));
}

TEST(SpeedCorrection, TheNextPlanUsesTheCorrectedSpeed) {
  Profile uniform = Uniform(4, 0.01, 0.02, 1000, {1.0, 0.95});
  for (SegmentCost& c : uniform.machines[0].segments[0].costs) {  // work grows with the samples
    c.forward_s *= c.micro_batch;
    c.forward_nograd_s *= c.micro_batch;
    c.backward_s *= c.micro_batch;
  }
  for (SegmentProfile& segment : uniform.machines[0].segments) {
    segment.costs = uniform.machines[0].segments[0].costs;
  }
  const auto profile = std::make_shared<const Profile>(uniform);
  const PlannedShapePolicy policy(profile);
  ShapeRequest request;
  request.machines = {{"m0", 2}};
  request.segments = 4;
  request.global_batch = 8;
  Result<GridPlan> before = policy.Plan(request);
  ASSERT_TRUE(before.ok()) << before.status().message();
  EXPECT_EQ(before->stages * 10 + before->replicas, 12);
  request.corrections = {{"m0", 2, 2.5}};
  Result<GridPlan> after = policy.Plan(request);
  ASSERT_TRUE(after.ok()) << after.status().message();
  EXPECT_EQ(after->stages * after->replicas, 1) << after->stages << " x " << after->replicas;
  EXPECT_GT(after->predicted_step_s, before->predicted_step_s);
  // The profile itself is unchanged; a correction for a load it did not measure is ignored.
  EXPECT_EQ(profile->machines[0].speed[1], 0.95);
  EXPECT_EQ(Corrected(*profile, {{"m0", 3, 2.0}}).machines[0].speed,
            (std::vector<double>{1.0, 0.95}));
  // A machine not profiled is corrected as its own copy of the typical one, which stays; with
  // one process busy, its figures themselves (one process's speed is 1 by definition).
  const Profile elsewhere = Corrected(*profile, {{"elsewhere", 1, 2.0}});
  ASSERT_EQ(elsewhere.machines.size(), 2u);
  EXPECT_EQ(elsewhere.machines[0].speed, (std::vector<double>{1.0, 0.95}));
  EXPECT_EQ(elsewhere.machines[1].address, "elsewhere");
  EXPECT_EQ(elsewhere.machines[1].speed, (std::vector<double>{1.0, 0.95}));
  const SegmentCost typical = elsewhere.CostAt(elsewhere.machines[0], 2, 4);
  const SegmentCost corrected = elsewhere.CostAt(elsewhere.machines[1], 2, 4);
  EXPECT_DOUBLE_EQ(corrected.forward_s, 2 * typical.forward_s);
  EXPECT_DOUBLE_EQ(corrected.backward_s, 2 * typical.backward_s);
  EXPECT_DOUBLE_EQ(elsewhere.machines[1].segments[2].update_s,
                   2 * elsewhere.machines[0].segments[2].update_s);
}

// A machine the profile does not know, found 2.5 times slower: the plan gives it the smaller
// share (10,4 of 14, as planner_test's machine profiled that slow), and says what compute it
// expects of each rank, against which the straggler rule judges them: 10 x 0.03 s on m0, and
// 4 x 0.03 x 2.5 on the other.
TEST(SpeedCorrection, AMachineFoundSlowerGetsLessOfTheBatchAndThePlanExpectsItsPace) {
  const auto profile = std::make_shared<const Profile>(Uniform(1, 0.01, 0.02));
  const PlannedShapePolicy policy(profile, 1);
  ShapeRequest request;
  request.machines = {{"m0", 1}, {"joined", 1}};
  request.segments = 1;
  request.global_batch = 14;
  request.chunk_size = 1;
  Result<GridPlan> even = policy.Plan(request);
  ASSERT_TRUE(even.ok()) << even.status().message();
  EXPECT_EQ(even->replicas, 2);
  EXPECT_TRUE(even->shares.empty());
  ASSERT_EQ(even->expected_compute_s.size(), 2u);
  EXPECT_NEAR(even->expected_compute_s[0], 7 * 0.03, 1e-12);
  EXPECT_NEAR(even->expected_compute_s[1], 7 * 0.03, 1e-12);
  EXPECT_EQ(even->unmeasured, (std::vector<std::string>{"joined"})) << "costed as m0";
  request.corrections = {{"joined", 1, 2.5}};
  Result<GridPlan> weighed = policy.Plan(request);
  ASSERT_TRUE(weighed.ok()) << weighed.status().message();
  EXPECT_EQ(weighed->shares, (Shares{10, 4}));
  ASSERT_EQ(weighed->expected_compute_s.size(), 2u);
  EXPECT_NEAR(weighed->expected_compute_s[0], 10 * 0.03, 1e-12);
  EXPECT_NEAR(weighed->expected_compute_s[1], 4 * 0.03 * 2.5, 1e-12);
  EXPECT_TRUE(weighed->unmeasured.empty()) << "its steps measured it";
  EXPECT_EQ(profile->machines.size(), 1u);  // the profile itself is unchanged
}

}  // namespace
}  // namespace mitra::planner
