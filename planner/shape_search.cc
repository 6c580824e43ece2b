#include "planner/shape_search.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <tuple>

namespace mitra::planner::detail {

double KthBest::Get() {
  if (keep_ <= 0 || static_cast<int>(found_.size()) < keep_) {
    return std::numeric_limits<double>::infinity();
  }
  std::nth_element(found_.begin(), found_.begin() + (keep_ - 1), found_.end());
  return found_[keep_ - 1];
}

bool FitsMemory(const std::vector<int64_t>& capacity, const std::vector<int>& rank_machines,
                const std::vector<int64_t>& memory_bytes) {
  std::vector<int64_t> used(capacity.size(), 0);
  for (size_t r = 0; r < rank_machines.size(); ++r) used[rank_machines[r]] += memory_bytes[r];
  for (size_t m = 0; m < capacity.size(); ++m) {
    if (capacity[m] > 0 && used[m] > capacity[m]) return false;
  }
  return true;
}

Result<PlanResult> SearchShapes(const PlanRequest& request, const std::vector<ShapeOption>& options,
                                int slots) {
  PlanResult result;
  KthBest kth_best(request.keep);
  // (p, d, chunk, schedule, ranges: interleaved's v chunks per rank)
  std::set<std::tuple<int, int, int64_t, ScheduleKind, size_t>> fitted;
  // World -> each rank's machine, as an index into request.machines and as its address.
  struct Placed {
    std::vector<int> index;
    std::vector<std::string> address;
  };
  std::map<int, Placed> placed;
  std::vector<int64_t> capacity;
  for (const MachineSlots& m : request.machines) {
    capacity.push_back(request.profile->Machine(m.address).memory_bytes);
  }
  for (const ShapeOption& option : options) {
    if (option.bound >= kth_best.Get()) break;
    const Candidate& c = option.candidate;
    const auto shape =
        std::make_tuple(c.stages, c.replicas, c.chunk_size, c.schedule, c.partition.size());
    // Recomputation and ZeRO-1 only for a shape that fits no cheaper way (the options of one
    // shape come in that order: ZeRO-1 before recomputation, which bounds above).
    if ((c.recompute || (c.zero && request.zero != 1)) && fitted.count(shape)) continue;
    const int world = c.stages * c.replicas;
    auto machines = placed.find(world);
    if (machines == placed.end()) {
      Placed p;
      p.index = RankMachines(SlotsOf(request.machines), world);
      for (const int m : p.index) p.address.push_back(request.machines[m].address);
      machines = placed.emplace(world, std::move(p)).first;
    }
    SimulationInput in;
    in.profile = request.profile;
    in.global_batch = request.global_batch;
    in.rank_machines = machines->second.address;
    in.candidate = c;
    Result<Prediction> prediction = Simulate(in);
    if (!prediction.ok()) return prediction.status();
    ++result.simulated;
    if (!FitsMemory(capacity, machines->second.index, prediction->memory_bytes)) {
      ++result.too_big;
      continue;
    }
    fitted.insert(shape);
    PlannedShape planned;
    planned.candidate = c;
    planned.idle_slots = slots - world;
    planned.prediction = std::move(prediction).value();
    kth_best.Add(planned.prediction.step_s);
    result.candidates.push_back(std::move(planned));
  }
  return result;
}

}  // namespace mitra::planner::detail
