#include "manager/parked_workers.h"

#include <algorithm>
#include <functional>
#include <set>
#include <utility>

namespace mitra::manager {

std::map<int, ParkedWorker> ParkedWorkers::TakeFor(const planner::GridPlan& plan,
                                                   const std::vector<Machine>& machines,
                                                   std::vector<ParkedWorker>* left) {
  std::map<int, ParkedWorker> kept;
  std::vector<bool> taken(workers_.size(), false);
  for (const bool same_local_rank : {true, false}) {
    for (const planner::RankPlacement& p : plan.ranks) {
      if (kept.count(p.rank)) continue;
      const std::string& address = machines[p.machine].Address();
      for (size_t i = 0; i < workers_.size(); ++i) {
        const ParkedWorker& w = workers_[i];
        if (taken[i] || w.machine != address) continue;
        if (same_local_rank && w.local_rank != p.local_rank) continue;
        taken[i] = true;
        kept.emplace(p.rank, w);
        break;
      }
    }
  }
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (!taken[i]) left->push_back(std::move(workers_[i]));
  }
  workers_.clear();
  return kept;
}

std::optional<int64_t> WholeHeldStep(const std::map<int, ParkedWorker>& workers, int segments) {
  std::set<int64_t, std::greater<>> steps;
  for (const auto& [rank, w] : workers) {
    if (w.held.step >= 0) steps.insert(w.held.step);
  }
  for (const int64_t step : steps) {
    bool whole = true;
    for (int segment = 0; segment < segments && whole; ++segment) {
      whole = std::any_of(workers.begin(), workers.end(),
                          [&](const auto& kv) { return kv.second.held.Holds(segment, step); });
    }
    if (whole) return step;
  }
  return std::nullopt;
}

std::vector<ParkedWorker> ParkedWorkers::TakeAll() { return std::exchange(workers_, {}); }

int ParkedWorkers::Count(int64_t generation, const std::string& machine) const {
  return static_cast<int>(std::count_if(workers_.begin(), workers_.end(), [&](const ParkedWorker& w) {
    return w.generation == generation && w.machine == machine;
  }));
}

bool ParkedWorkers::Remove(int64_t generation, int rank) {
  const auto it = std::find_if(workers_.begin(), workers_.end(), [&](const ParkedWorker& w) {
    return w.generation == generation && w.rank == rank;
  });
  if (it == workers_.end()) return false;
  workers_.erase(it);
  return true;
}

}  // namespace mitra::manager
