#include "manager/standby.h"

#include <algorithm>
#include <utility>

namespace mitra::manager {

StartStandbyAction StandbyWorkers::Start(const Machine& machine, int local_rank) {
  const int id = next_id_++;
  starting_[id] = ParkedWorker{kStandbyGeneration, id, machine.Address(), local_rank};
  return StartStandbyAction{id, machine, local_rank, std::nullopt};
}

std::vector<StartStandbyAction> StandbyWorkers::KeepSpares(const std::vector<Machine>& machines,
                                                            const planner::GridPlan& plan) {
  std::vector<StartStandbyAction> started;
  std::set<std::string> seen;
  for (const Machine& machine : machines) {
    if (!seen.insert(machine.Address()).second) continue;
    std::vector<int> covered = StagesCovered(machine.Address(), plan);
    for (int n = SparesOn(machine.Address()); n < spares_; ++n) {
      StartStandbyAction& start = started.emplace_back(Start(machine, /*local_rank=*/-1));
      if (covered.empty()) continue;
      const int stage = static_cast<int>(std::min_element(covered.begin(), covered.end()) -
                                         covered.begin());
      ++covered[stage];
      meant_for_[start.id] = stage;
      // A spare may take the stage in any pipeline: the first's cut is the hint.
      start.stage = contract::StandbyStage{stage, plan.stages,
                                           planner::ReplicaPartition(plan.partition, 0)};
    }
  }
  return started;
}

std::vector<int> StandbyWorkers::StagesCovered(const std::string& address,
                                               const planner::GridPlan& plan) const {
  std::vector<int> covered(std::max(plan.stages, 0), 0);
  const auto count = [&](int id) {
    const auto it = meant_for_.find(id);
    if (it != meant_for_.end() && it->second < plan.stages) ++covered[it->second];
  };
  for (const auto& [id, worker] : starting_) {
    if (worker.machine == address) count(id);
  }
  for (const ParkedWorker& worker : parked_.workers()) {
    if (worker.generation == kStandbyGeneration && worker.machine == address) count(worker.rank);
  }
  return covered;
}

int StandbyWorkers::SparesOn(const std::string& address) const {
  int n = parked_.Count(kStandbyGeneration, address);
  for (const auto& [id, worker] : starting_) n += worker.machine == address;
  return n;
}

std::optional<ParkedWorker> StandbyWorkers::TakeStarting(int id) {
  const auto it = starting_.find(id);
  if (it == starting_.end()) return std::nullopt;
  ParkedWorker worker = std::move(it->second);
  starting_.erase(it);
  return worker;
}

std::map<int, ParkedWorker> StandbyWorkers::TakeFor(const planner::GridPlan& plan,
                                                    const std::vector<Machine>& machines,
                                                    std::vector<ParkedWorker>* released) {
  std::vector<ParkedWorker> unneeded;
  std::map<int, ParkedWorker> kept = parked_.TakeFor(plan, machines, &unneeded);
  for (const auto& [rank, w] : kept) {
    if (w.generation == kStandbyGeneration) meant_for_.erase(w.rank);  // a spare no more
  }
  for (ParkedWorker& w : unneeded) {
    const bool used = std::any_of(machines.begin(), machines.end(),
                                  [&](const Machine& m) { return m.Address() == w.machine; });
    if (w.generation == kStandbyGeneration && used && WantsSpare(w.machine)) {
      parked_.Add(std::move(w));
    } else {
      if (w.generation == kStandbyGeneration) meant_for_.erase(w.rank);
      released->push_back(std::move(w));
    }
  }
  return kept;
}

std::vector<ParkedWorker> StandbyWorkers::TakeAll() {
  std::vector<ParkedWorker> workers = parked_.TakeAll();
  for (auto& [id, worker] : starting_) workers.push_back(std::move(worker));
  starting_.clear();
  meant_for_.clear();
  return workers;
}

void StandbyWorkers::BeginWarmUp(std::string why, std::set<int> ids) {
  warm_up_ = WarmUp{std::move(why), std::move(ids)};
}

bool StandbyWorkers::Arrived(int id) { return warm_up_ && warm_up_->pending.erase(id) > 0; }

std::optional<StandbyWorkers::EndedWarmUp> StandbyWorkers::EndWarmUp() {
  if (!warm_up_) return std::nullopt;
  EndedWarmUp ended{std::move(warm_up_->why), {}};
  for (const int id : warm_up_->pending) {
    if (std::optional<ParkedWorker> worker = TakeStarting(id)) ended.late.push_back(*worker);
  }
  warm_up_.reset();
  return ended;
}

}  // namespace mitra::manager
