#include "run/worker_processes.h"

namespace mitra::run {

void WorkerProcesses::BeginGeneration(int64_t generation) {
  ranks_.clear();
  generation_ = generation;
}

LiveRank* WorkerProcesses::Find(int64_t generation, int rank) {
  if (generation != generation_) return nullptr;
  const auto it = ranks_.find(rank);
  return it == ranks_.end() ? nullptr : &it->second;
}

void WorkerProcesses::Parked(int rank) {
  const auto it = ranks_.find(rank);
  if (it != ranks_.end() && it->second.runner != nullptr) parked_[{generation_, rank}] = it->second;
}

void WorkerProcesses::AddStandby(int id, LiveRank live) {
  parked_[{manager::kStandbyGeneration, id}] = std::move(live);
}

std::optional<LiveRank> WorkerProcesses::TakeParked(const Place& parked_as) {
  const auto it = parked_.find(parked_as);
  if (it == parked_.end()) return std::nullopt;
  LiveRank taken = std::move(it->second);
  parked_.erase(it);
  return taken;
}

void WorkerProcesses::Kept(const LiveRank& worker, const Place& place) {
  routes_[{worker.runner, worker.id}] = place;
}

void WorkerProcesses::Released(const LiveRank& worker) {
  released_.insert({worker.runner, worker.id});
}

WorkerProcesses::Place WorkerProcesses::Route(const Key& key, const Place& sent_as) const {
  const auto route = routes_.find(key);
  return route == routes_.end() ? sent_as : route->second;
}

void WorkerProcesses::Exited(const Key& key) {
  routes_.erase(key);
  released_.erase(key);
  for (auto it = parked_.begin(); it != parked_.end(); ++it) {
    if (it->second.runner == key.first && it->second.id == key.second) {
      parked_.erase(it);  // gone while parked: nothing will keep it
      break;
    }
  }
}

}  // namespace mitra::run
