#include "planner/replica_groups.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

namespace mitra::planner::detail {
namespace {

// The slots of each machine when `rank_machines` fill more than kRepresentativesAbove ranks on
// machines that are all alike and of equal slots (a last one may be partly filled); 0 when not.
int UniformSlots(const Profile& profile, const std::vector<std::string>& rank_machines) {
  const int world = static_cast<int>(rank_machines.size());
  int slots = 0;
  while (slots < world && rank_machines[slots] == rank_machines[0]) ++slots;
  bool uniform = world > kRepresentativesAbove;
  const MachineProfile* typical = &profile.Machine(rank_machines[0]);
  for (int r = 0; uniform && r < world; r += slots) {
    const int end = std::min(world, r + slots);
    uniform = &profile.Machine(rank_machines[r]) == typical &&
              rank_machines[end - 1] == rank_machines[r] &&
              (end == world || rank_machines[end] != rank_machines[r]);
  }
  return uniform ? slots : 0;
}

}  // namespace

std::vector<int> SimulatedReplicas(const Profile& profile,
                                   const std::vector<std::string>& rank_machines, int stages,
                                   int replicas, int extra) {
  const int D = replicas;
  const int slots = UniformSlots(profile, rank_machines);
  if (slots == 0) {
    std::vector<int> all(D);
    std::iota(all.begin(), all.end(), 0);
    return all;
  }
  const int q = slots / std::gcd(stages, slots);
  std::set<int> chosen;
  auto window = [&](int start) {
    start = std::max(0, std::min(start, D - 1)) / q * q;
    for (int d = start; d < std::min(D, start + q); ++d) chosen.insert(d);
  };
  window(0);
  window(extra - 1);
  window(extra);
  window((extra + q - 1) / q * q);
  window(D - 1);
  window(D - 1 - q);  // the last full period, before a partly filled last machine
  return {chosen.begin(), chosen.end()};
}

std::vector<std::vector<int>> LinkedReplicaGroups(const RankSet& ranks) {
  std::map<int, int> parent;  // replica -> parent replica
  for (const RankSpec& spec : ranks.specs) parent[spec.replica] = spec.replica;
  auto find = [&](int x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  std::vector<int> owner(ranks.addresses.size(), -1);  // machine -> its first replica
  for (const RankSpec& spec : ranks.specs) {
    if (owner[spec.machine] < 0) {
      owner[spec.machine] = spec.replica;
    } else {
      parent[find(spec.replica)] = find(owner[spec.machine]);
    }
  }
  std::map<int, std::vector<int>> groups;  // root replica -> its specs
  for (size_t i = 0; i < ranks.specs.size(); ++i) {
    groups[find(ranks.specs[i].replica)].push_back(static_cast<int>(i));
  }
  std::vector<std::vector<int>> out;
  for (auto& [root, members] : groups) out.push_back(std::move(members));
  return out;
}

}  // namespace mitra::planner::detail
