#include "planner/planner.h"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "planner/batch_split.h"

namespace mitra::planner {
namespace {

constexpr int kAllReplicaCountsUpTo = 64;

// Replica counts to try for at most `most`: all of them on small machine lists, else the powers
// of two and `most` itself.
std::vector<int> ReplicaCounts(int most) {
  std::vector<int> out;
  if (most <= kAllReplicaCountsUpTo) {
    for (int d = 1; d <= most; ++d) out.push_back(d);
    return out;
  }
  for (int d = 1; d < most; d *= 2) out.push_back(d);
  out.push_back(most);
  return out;
}

}  // namespace

std::vector<std::string> PlaceRanks(const std::vector<MachineSlots>& machines, int world) {
  std::vector<std::string> out;
  for (const MachineSlots& m : machines) {
    for (int s = 0; s < m.slots && static_cast<int>(out.size()) < world; ++s) out.push_back(m.address);
  }
  return out;
}

std::vector<int> BalancedPartition(const std::vector<double>& cost,
                                   const std::vector<double>& speed) {
  const int n = static_cast<int>(cost.size()), p = static_cast<int>(speed.size());
  std::vector<double> prefix(n + 1, 0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + cost[i];
  const double inf = std::numeric_limits<double>::infinity();
  // best[s][i]: the smallest possible largest stage time when stages 0..s-1 hold segments 0..i-1.
  std::vector<std::vector<double>> best(p + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<int>> cut(p + 1, std::vector<int>(n + 1, 0));
  best[0][0] = 0;
  for (int s = 1; s <= p; ++s) {
    for (int i = s; i <= n - (p - s); ++i) {
      for (int j = s - 1; j < i; ++j) {
        if (best[s - 1][j] == inf) continue;
        const double stage = (prefix[i] - prefix[j]) / std::max(1e-12, speed[s - 1]);
        const double worst = std::max(best[s - 1][j], stage);
        if (worst < best[s][i]) {
          best[s][i] = worst;
          cut[s][i] = j;
        }
      }
    }
  }
  std::vector<int> counts(p);
  for (int s = p, i = n; s > 0; --s) {
    counts[s - 1] = i - cut[s][i];
    i = cut[s][i];
  }
  return counts;
}

Result<PlanResult> PlanShapes(const PlanRequest& request) {
  if (request.profile == nullptr || request.profile->machines.empty()) {
    return Status::InvalidArgument("no profile to plan from: run `mitra profile` first");
  }
  const Profile& profile = *request.profile;
  const int64_t batch = request.global_batch;
  const int segments = profile.num_segments();
  int slots = 0;
  for (const MachineSlots& m : request.machines) slots += m.slots;
  if (slots < 1) return Status::InvalidArgument("no slots to plan for: list machines with slots");
  if (batch < 1) return Status::InvalidArgument("the batch must be at least 1 sample");
  if (request.stages > segments) {
    return Status::InvalidArgument("--nstages " + std::to_string(request.stages) + " is more than the " +
                                   std::to_string(segments) + " segments of the profiled program");
  }

  std::vector<int> depths;
  if (request.stages > 0) {
    depths.push_back(request.stages);
  } else {
    for (int p = 1; p <= std::min(segments, slots); ++p) depths.push_back(p);
  }
  PlanResult result;
  std::set<std::tuple<int, int, int64_t, std::string, bool>> seen;
  for (int p : depths) {
    if (p > slots) continue;
    for (int d : ReplicaCounts(slots / p)) {
      std::set<int64_t> chunks;
      if (request.chunk_size > 0) {
        chunks.insert(request.chunk_size);
      } else {
        for (int64_t c : profile.micro_batches) chunks.insert(c);
        chunks.insert(ChunkSizeFor(batch, d, p == 1 ? 1 : 4 * p));
      }
      const std::vector<std::string> machines = PlaceRanks(request.machines, p * d);
      // Stage speeds for the partition: replica 0's machines, alone.
      std::vector<const MachineProfile*> stage_machine(p);
      for (int s = 0; s < p; ++s) stage_machine[s] = &profile.Machine(machines[s]);
      for (int64_t chunk : chunks) {
        if (chunk > batch || NumMicroBatches(batch, chunk) < d) continue;
        // Balance forward + backward + update of each segment, weighted by its stage's
        // machine (the first machine's costs, scaled by each machine's relative speed).
        std::vector<double> cost(segments);
        const MachineProfile& typical = *stage_machine[0];
        const int64_t per_replica = (NumMicroBatches(batch, chunk) + d - 1) / d;
        for (int s = 0; s < segments; ++s) {
          const SegmentCost c = profile.CostAt(typical, s, chunk);
          cost[s] = static_cast<double>(per_replica) * (c.forward_s + c.backward_s) +
                    typical.segments[s].update_s;
        }
        std::vector<double> speed(p);
        for (int s = 0; s < p; ++s) {
          const SegmentCost mine = profile.CostAt(*stage_machine[s], 0, chunk);
          const SegmentCost ref = profile.CostAt(typical, 0, chunk);
          speed[s] = (mine.forward_s + mine.backward_s) > 0
                         ? (ref.forward_s + ref.backward_s) / (mine.forward_s + mine.backward_s)
                         : 1.0;
        }
        const std::vector<int> partition = BalancedPartition(cost, speed);
        const std::vector<std::string> schedules =
            p == 1 ? std::vector<std::string>{"1f1b"} : request.schedules;
        for (const std::string& schedule : schedules) {
          for (bool recompute : {false, true}) {
            if (recompute && (p == 1 || schedule == "varuna")) continue;
            if (!seen.insert({p, d, chunk, schedule, recompute}).second) continue;
            SimulationInput in;
            in.profile = &profile;
            in.global_batch = batch;
            in.rank_machines = machines;
            in.candidate.stages = p;
            in.candidate.replicas = d;
            in.candidate.chunk_size = chunk;
            in.candidate.schedule = schedule;
            in.candidate.recompute = recompute;
            in.candidate.partition = partition;
            Result<Prediction> prediction = Simulate(in);
            if (!prediction.ok()) return prediction.status();
            ++result.simulated;
            // Memory, machine by machine.
            std::map<std::string, int64_t> used;
            for (size_t r = 0; r < machines.size(); ++r) used[machines[r]] += prediction->memory_bytes[r];
            bool fits = true;
            for (const MachineSlots& m : request.machines) {
              const int64_t capacity = profile.Machine(m.address).memory_bytes;
              if (capacity > 0 && used[m.address] > capacity) fits = false;
            }
            if (!fits) {
              ++result.too_big;
              continue;  // recomputation, next, may fit
            }
            PlannedShape shape;
            shape.candidate = in.candidate;
            shape.idle_slots = slots - p * d;
            shape.prediction = std::move(prediction).value();
            result.candidates.push_back(std::move(shape));
            break;  // recomputation only when needed to fit
          }
        }
      }
    }
  }
  if (result.candidates.empty()) {
    if (result.too_big > 0) {
      return Status::NotFound("none of the " + std::to_string(result.simulated) +
                              " shapes considered fits the machines' memory: add machines or "
                              "memory, or use a smaller batch");
    }
    return Status::InvalidArgument("no shape of a batch of " + std::to_string(batch) + " fits " +
                                   std::to_string(slots) + " slots");
  }
  std::stable_sort(result.candidates.begin(), result.candidates.end(),
                   [](const PlannedShape& a, const PlannedShape& b) {
                     if (a.prediction.step_s != b.prediction.step_s) {
                       return a.prediction.step_s < b.prediction.step_s;
                     }
                     return a.idle_slots > b.idle_slots;
                   });
  return result;
}

}  // namespace mitra::planner
