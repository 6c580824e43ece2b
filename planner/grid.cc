#include "planner/grid.h"

#include <algorithm>
#include <numeric>

#include "mitra/planner/batch_split.h"

namespace mitra::planner {

std::vector<int> SlotsOf(const std::vector<MachineSlots>& machines) {
  std::vector<int> slots;
  for (const MachineSlots& m : machines) slots.push_back(m.slots);
  return slots;
}

std::string ReplicaPartition(const std::string& partition, int replica) {
  if (partition.find('/') == std::string::npos) return partition;
  size_t begin = 0;
  for (int d = 0; d < replica; ++d) {
    begin = partition.find('/', begin);
    if (begin == std::string::npos) return "";
    ++begin;
  }
  const size_t end = partition.find('/', begin);
  return partition.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

std::vector<int> RankMachines(const std::vector<int>& slots_per_machine, int world) {
  std::vector<int> out;
  for (size_t m = 0; m < slots_per_machine.size(); ++m) {
    for (int s = 0; s < slots_per_machine[m] && static_cast<int>(out.size()) < world; ++s) {
      out.push_back(static_cast<int>(m));
    }
  }
  return out;
}

int DefaultChunkSize(int64_t global_batch, int stages, int replicas, bool kept) {
  const int64_t per_replica = stages <= 1 && !kept ? 1 : 4 * int64_t{std::max(1, stages)};
  const int64_t chunk = planner::ChunkSizeFor(global_batch, replicas, per_replica);
  return static_cast<int>(std::clamp<int64_t>(chunk, 1, 1 << 30));
}

Result<GridPlan> PlanGrid(const GridRequest& request) {
  const int slots =
      std::accumulate(request.slots_per_machine.begin(), request.slots_per_machine.end(), 0);
  const int p = request.stages;
  const std::string np = "--nstages " + std::to_string(p);
  if (p < 1) return Status::InvalidArgument("--nstages must be at least 1");
  if (request.segments < 1) {
    return Status::InvalidArgument("the program reports " + std::to_string(request.segments) +
                                   " segments; it must have at least one");
  }
  if (p > request.segments) {
    return Status::InvalidArgument(np + " is more than the " + std::to_string(request.segments) +
                                   " segments the program's model is cut into; use --nstages " +
                                   std::to_string(request.segments) +
                                   " or fewer (or add CutPoints to the model)");
  }
  if (p > slots) {
    return Status::InvalidArgument(np + " needs at least " + std::to_string(p) +
                                   " slots but the machine list has " + std::to_string(slots) +
                                   "; add slots or machines, or lower --nstages");
  }
  GridPlan plan;
  plan.stages = p;
  plan.replicas = request.replicas > 0 ? std::min(request.replicas, slots / p) : slots / p;
  plan.global_batch = request.global_batch;
  const int64_t b = request.global_batch;
  if (b < plan.replicas) {
    return Status::InvalidArgument(
        "--batch-size " + std::to_string(b) + " is smaller than the " +
        std::to_string(plan.replicas) + " replicas (" + std::to_string(slots) + " slots / " +
        std::to_string(p) + (p == 1 ? " stage" : " stages") +
        "), so a replica would get no samples; use --batch-size " +
        std::to_string(plan.replicas) + " or more");
  }
  if (request.chunk_size > b) {
    return Status::InvalidArgument("--chunk-size " + std::to_string(request.chunk_size) +
                                   " is larger than --batch-size " + std::to_string(b) +
                                   "; use --chunk-size " + std::to_string(b) + " or less");
  }
  plan.chunk_size = request.chunk_size > 0
                        ? request.chunk_size
                        : DefaultChunkSize(b, p, plan.replicas, request.chunk_kept);
  // Every replica takes whole micro-batches of the global batch.
  const int64_t micro_batches = planner::NumMicroBatches(b, plan.chunk_size);
  if (micro_batches < plan.replicas) {
    plan.idle_reason = "a batch of " + std::to_string(b) + " in micro-batches of " +
                       std::to_string(plan.chunk_size) + " feeds at most " +
                       std::to_string(micro_batches) + " replicas";
    plan.replicas = static_cast<int>(micro_batches);
  }
  plan.total_slots = slots;
  plan.idle_slots = slots - plan.world_size();
  plan.stage_map = contract::StageMap::Default(p, plan.replicas);
  const std::vector<int> machine_of = RankMachines(request.slots_per_machine, plan.world_size());
  for (int rank = 0; rank < plan.world_size(); ++rank) {
    RankPlacement placement;
    placement.rank = rank;
    placement.machine = machine_of[rank];
    placement.local_rank = rank > 0 && machine_of[rank - 1] == machine_of[rank]
                               ? plan.ranks.back().local_rank + 1
                               : 0;
    placement.stage = rank % p;
    placement.replica = rank / p;
    plan.ranks.push_back(placement);
  }
  return plan;
}

}  // namespace mitra::planner
