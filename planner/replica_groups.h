// Which replicas of a shape the simulator (planner/simulator.h) runs, and which of them it must
// run together. Internals of the simulator, declared here so that they can be tested on their
// own.
#pragma once

#include <string>
#include <vector>

#include "planner/profile.h"
#include "planner/step_ranks.h"

namespace mitra::planner::detail {

// The replicas to simulate, ascending: all D of them, or, on more than kRepresentativesAbove
// ranks on like machines (each of S slots, the ranks filling them in order), representatives.
// There the machines and the replicas on them repeat every q = S / gcd(P, S) replicas, so a
// whole period of replicas stands for every period whose replicas take as many micro-batches:
// the first period, the ones around where the replicas with an extra micro-batch end (the first
// `extra` replicas take one more), the last full one and the last.
std::vector<int> SimulatedReplicas(const Profile& profile,
                                   const std::vector<std::string>& rank_machines, int stages,
                                   int replicas, int extra);

// The simulated ranks grouped by the replicas that shared machines link (replicas that share no
// machine only meet in the all-reduce): each group's spec indices, ascending; the groups in a
// fixed order (of the replica that stands for each in the union).
std::vector<std::vector<int>> LinkedReplicaGroups(const RankSet& ranks);

}  // namespace mitra::planner::detail
