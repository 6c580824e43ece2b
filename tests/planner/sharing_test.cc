// Sharing: the speed of k processes computing at once, from every process's rate, and the
// figures no machine can produce.
#include "planner/sharing.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace mitra::planner
