#include "manager/grid.h"

#include <algorithm>
#include <numeric>

namespace mitra::manager {

std::string StageToRankMap(int stages, int replicas) {
  std::string map;
  for (int s = 0; s < stages; ++s) {
    for (int d = 0; d < replicas; ++d) {
      if (d > 0) map += ',';
      map += std::to_string(s + stages * d);
    }
    map += ';';
  }
  return map;
}

int64_t ReplicaBatch(int64_t global_batch, int replicas, int replica) {
  return global_batch / replicas + (replica < global_batch % replicas ? 1 : 0);
}

int DefaultChunkSize(int64_t min_replica_batch, int stages) {
  const int64_t chunk = stages <= 1 ? min_replica_batch : min_replica_batch / (4 * int64_t{stages});
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
  plan.replicas = slots / p;
  plan.total_slots = slots;
  plan.idle_slots = slots - plan.world_size();
  plan.global_batch = request.global_batch;
  const int d = plan.replicas;
  if (request.global_batch < d) {
    return Status::InvalidArgument(
        "--batch-size " + std::to_string(request.global_batch) + " is smaller than the " +
        std::to_string(d) + " replicas (" + std::to_string(slots) + " slots / " +
        std::to_string(p) + (p == 1 ? " stage" : " stages") +
        "), so a replica would get no samples; use --batch-size " + std::to_string(d) + " or more");
  }
  const int64_t min_replica_batch = ReplicaBatch(request.global_batch, d, d - 1);
  plan.chunk_size =
      request.chunk_size > 0 ? request.chunk_size : DefaultChunkSize(min_replica_batch, p);
  if (plan.chunk_size > min_replica_batch) {
    return Status::InvalidArgument(
        "--chunk-size " + std::to_string(plan.chunk_size) +
        " is larger than the smallest per-replica batch (" + std::to_string(min_replica_batch) +
        " samples = " + std::to_string(request.global_batch) + " / " + std::to_string(d) +
        " replicas); use --chunk-size " + std::to_string(min_replica_batch) + " or less");
  }
  plan.stage_to_rank_map = StageToRankMap(p, d);
  int machine = 0;
  int local_rank = 0;
  for (int rank = 0; rank < plan.world_size(); ++rank) {
    while (local_rank >= request.slots_per_machine[machine]) {
      ++machine;
      local_rank = 0;
    }
    RankPlacement placement;
    placement.rank = rank;
    placement.machine = machine;
    placement.local_rank = local_rank++;
    placement.stage = rank % p;
    placement.replica = rank / p;
    placement.replica_batch = ReplicaBatch(request.global_batch, d, placement.replica);
    plan.ranks.push_back(placement);
  }
  return plan;
}

}  // namespace mitra::manager
