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

namespace {

// Shares that give each replica micro-batches in proportion to its rate in `prediction` (its
// micro-batches over its pipeline phase); empty when those are even or what `c` has already.
Shares SharesByRate(const Candidate& c, int64_t global_batch, const Prediction& prediction) {
  const int64_t m = NumMicroBatches(global_batch, c.chunk_size);
  std::vector<double> rates;
  for (int d = 0; d < c.replicas; ++d) {
    const double phase = prediction.replica_phase_s[d];
    if (!(phase > 0)) return {};
    rates.push_back(static_cast<double>(ShareOf(global_batch, c.chunk_size, c.shares, c.replicas, d)
                                            .micro_batches) / phase);
  }
  const int64_t granule = c.schedule == ScheduleKind::kInterleaved ? c.stages : 1;
  Shares shares = SharesBySpeed(m, rates, granule);
  const Shares current = c.shares.empty() ? EvenShares(m, c.replicas) : c.shares;
  if (!Uneven(shares) || shares == current) return {};
  return shares;
}

}  // namespace

std::vector<PlannedShape> UnevenShapes(const SimulationInput& even_input,
                                       const Prediction& even) {
  std::vector<PlannedShape> out;
  if (even_input.candidate.replicas < 2) return out;
  out.reserve(kShareRounds);  // `last` points into it
  SimulationInput in = even_input;
  const Prediction* last = &even;
  std::set<Shares> tried;
  for (int round = 0; round < kShareRounds; ++round) {
    Shares shares = SharesByRate(in.candidate, in.global_batch, *last);
    if (shares.empty() || !tried.insert(shares).second) break;
    in.candidate.shares = std::move(shares);
    // The shares pass CheckShares by construction and the shape simulated evenly: nothing is
    // left to refuse, and the even candidate stands if the simulator should refuse anyway.
    Result<Prediction> prediction = Simulate(in);
    if (!prediction.ok()) break;
    PlannedShape& planned = out.emplace_back();
    planned.candidate = in.candidate;
    planned.prediction = std::move(prediction).value();
    last = &planned.prediction;
  }
  return out;
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
    if ((c.recompute || (c.zero && request.zero != true)) && fitted.count(shape)) continue;
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
    // On machines that differ, the same shape with the batch shared by the replicas' speeds.
    std::vector<PlannedShape> uneven = UnevenShapes(in, planned.prediction);
    kth_best.Add(planned.prediction.step_s);
    result.candidates.push_back(std::move(planned));
    for (PlannedShape& u : uneven) {
      ++result.simulated;
      if (!FitsMemory(capacity, machines->second.index, u.prediction.memory_bytes)) continue;
      u.idle_slots = slots - world;
      kth_best.Add(u.prediction.step_s);
      result.candidates.push_back(std::move(u));
    }
  }
  return result;
}

}  // namespace mitra::planner::detail
