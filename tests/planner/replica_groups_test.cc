// Which replicas the simulator runs, and which together.
#include "planner/replica_groups.h"

#include <gtest/gtest.h>

#include "tests/planner/uniform_profile.h"

namespace mitra::planner::detail {
namespace {

// `world` ranks on machines of `slots` slots each, filled in order.
std::vector<std::string> Filled(int world, int slots) {
  std::vector<std::string> out;
  for (int r = 0; r < world; ++r) out.push_back("m0#" + std::to_string(r / slots));
  return out;
}

TEST(SimulatedReplicas, AllOfThemOnAFewRanksOrMachinesUnlike) {
  Profile p = Uniform(4, 0.01, 0.02);
  EXPECT_EQ(SimulatedReplicas(p, Filled(8, 4), 2, 4, 0), (std::vector<int>{0, 1, 2, 3}));
  // 600 ranks, but one machine unlike the others.
  p.machines.push_back(p.machines[0]);
  p.machines[1].address = "big";
  std::vector<std::string> machines = Filled(600, 4);
  for (int r = 4; r < 8; ++r) machines[r] = "big";
  EXPECT_EQ(SimulatedReplicas(p, machines, 2, 300, 0).size(), 300u);
}

TEST(SimulatedReplicas, OnALargeListOfLikeMachinesAPeriodStandsForEachRunOfReplicas) {
  const Profile p = Uniform(4, 0.01, 0.02);
  // P = 2 on machines of 4 slots: every 2 replicas fill 1 machine, the period q = 2.
  EXPECT_EQ(SimulatedReplicas(p, Filled(600, 4), 2, 300, 0),
            (std::vector<int>{0, 1, 296, 297, 298, 299}));
  // The first 7 replicas take one micro-batch more: the periods around 7 stand for both runs.
  EXPECT_EQ(SimulatedReplicas(p, Filled(600, 4), 2, 300, 7),
            (std::vector<int>{0, 1, 6, 7, 8, 9, 296, 297, 298, 299}));
  // P = 3 on 4 slots: pipelines straddle machines and repeat every 4 replicas.
  EXPECT_EQ(SimulatedReplicas(p, Filled(300, 4), 3, 100, 0),
            (std::vector<int>{0, 1, 2, 3, 92, 93, 94, 95, 96, 97, 98, 99}));
}

RankSpec Placed(int replica, int machine) {
  RankSpec spec;
  spec.replica = replica;
  spec.machine = machine;
  return spec;
}

TEST(LinkedReplicaGroups, ReplicasThatShareAMachineRunTogether) {
  RankSet ranks;
  ranks.addresses = {"a", "b", "c", "d", "e"};
  // Replica 0 on a, a; replica 1 on b, c; replica 2 on c, d; replica 3 on e, e.
  ranks.specs = {Placed(0, 0), Placed(0, 0), Placed(1, 1), Placed(1, 2),
                 Placed(2, 2), Placed(2, 3), Placed(3, 4), Placed(3, 4)};
  EXPECT_EQ(LinkedReplicaGroups(ranks),
            (std::vector<std::vector<int>>{{0, 1}, {2, 3, 4, 5}, {6, 7}}));
}

TEST(LinkedReplicaGroups, AChainOfSharedMachinesLinksEveryReplicaOnIt) {
  RankSet ranks;
  ranks.addresses = {"a", "b", "c"};
  // P = 3 on machines of 2 slots: a a | b b | c c. Replica 0 on a, a, b; replica 1 on b, c, c.
  ranks.specs = {Placed(0, 0), Placed(0, 0), Placed(0, 1),
                 Placed(1, 1), Placed(1, 2), Placed(1, 2)};
  EXPECT_EQ(LinkedReplicaGroups(ranks), (std::vector<std::vector<int>>{{0, 1, 2, 3, 4, 5}}));
}

}  // namespace
}  // namespace mitra::planner::detail
