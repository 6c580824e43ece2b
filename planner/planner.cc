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
  for (int m : RankMachines(SlotsOf(machines), world)) out.push_back(machines[m].address);
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
  if (request.chunk_size > batch) {
    return Status::InvalidArgument("micro-batches of " + std::to_string(request.chunk_size) +
                                   " samples (--chunk-size) are more than the batch of " +
                                   std::to_string(batch) + ": give --chunk-size " +
                                   std::to_string(batch) + " or less, or a larger --batch-size");
  }
  if (request.stages > segments) {
    return Status::InvalidArgument("--nstages " + std::to_string(request.stages) + " is more than the " +
                                   std::to_string(segments) + " segments of the profiled program");
  }
  double fastest = 1.0;  // the most a process's speed can be (speed per process <= this)
  for (const MachineProfile& m : profile.machines) {
    for (double v : m.speed) fastest = std::max(fastest, v);
  }

  // 1. Every option, with a lower bound of its step time: its busiest stage's compute, at the
  //    fastest any machine runs it, with no bubble and no communication.
  struct Option {
    int p = 0, d = 0;
    int64_t chunk = 0;
    std::string schedule;
    bool recompute = false;
    std::vector<int> partition;
    double bound = 0;
  };
  std::vector<Option> options;
  std::vector<int> depths;
  if (request.stages > 0) {
    depths.push_back(request.stages);
  } else {
    for (int p = 1; p <= std::min(segments, slots); ++p) depths.push_back(p);
  }
  std::map<int64_t, std::vector<double>> best_segment;  // chunk -> per segment (f, b) at best
  auto segment_costs = [&](int64_t chunk) -> const std::vector<double>& {
    auto it = best_segment.find(chunk);
    if (it != best_segment.end()) return it->second;
    std::vector<double> out(2 * segments, std::numeric_limits<double>::infinity());
    for (const MachineProfile& m : profile.machines) {
      for (int s = 0; s < segments; ++s) {
        const SegmentCost c = profile.CostAt(m, s, chunk);
        out[2 * s] = std::min(out[2 * s], c.forward_s);
        out[2 * s + 1] = std::min(out[2 * s + 1], c.backward_s);
      }
    }
    return best_segment.emplace(chunk, out).first->second;
  };
  for (int p : depths) {
    if (p > slots) continue;
    const std::vector<std::string> first_machines = PlaceRanks(request.machines, p);
    for (int d : ReplicaCounts(slots / p)) {
      std::set<int64_t> chunks;
      if (request.chunk_size > 0) {
        chunks.insert(request.chunk_size);
      } else {
        for (int64_t c : profile.micro_batches) chunks.insert(c);
        chunks.insert(DefaultChunkSize(batch, p, d, request.chunk_kept));
      }
      for (int64_t chunk : chunks) {
        if (chunk > batch || NumMicroBatches(batch, chunk) < d) continue;
        const int64_t per_replica = (NumMicroBatches(batch, chunk) + d - 1) / d;
        // Balance forward + backward + update of each segment on its stage's machine (replica
        // 0's), each machine weighted by its speed relative to the first.
        const MachineProfile& typical = profile.Machine(first_machines[0]);
        std::vector<double> cost(segments);
        for (int s = 0; s < segments; ++s) {
          const SegmentCost c = profile.CostAt(typical, s, chunk);
          cost[s] = static_cast<double>(per_replica) * (c.forward_s + c.backward_s) +
                    typical.segments[s].update_s;
        }
        std::vector<double> speed(p, 1.0);
        const SegmentCost ref = profile.CostAt(typical, 0, chunk);
        for (int s = 0; s < p; ++s) {
          const SegmentCost mine = profile.CostAt(profile.Machine(first_machines[s]), 0, chunk);
          if (mine.forward_s + mine.backward_s > 0) {
            speed[s] = (ref.forward_s + ref.backward_s) / (mine.forward_s + mine.backward_s);
          }
        }
        const std::vector<int> partition = BalancedPartition(cost, speed);
        const std::vector<double>& best = segment_costs(chunk);
        const std::vector<std::string> schedules =
            p == 1 ? std::vector<std::string>{"1f1b"} : request.schedules;
        for (const std::string& schedule : schedules) {
          for (bool recompute : {false, true}) {
            if (recompute && (p == 1 || schedule == "varuna")) continue;
            const bool discards = recompute || schedule == "varuna";
            double bound = 0;
            for (int s = 0, seg = 0; s < p; ++s) {
              double work = 0;
              for (int k = 0; k < partition[s]; ++k, ++seg) {
                work += best[2 * seg] * (discards && s + 1 < p ? 2 : 1) + best[2 * seg + 1];
              }
              bound = std::max(bound, static_cast<double>(per_replica) * work / fastest);
            }
            options.push_back({p, d, chunk, schedule, recompute, partition, bound});
          }
        }
      }
    }
  }
  std::stable_sort(options.begin(), options.end(),
                   [](const Option& a, const Option& b) { return a.bound < b.bound; });

  // 2. Simulate in the order of the bounds until no option left can beat the `keep`-th best
  //    (an option with recomputation only when the same one without does not fit).
  PlanResult result;
  std::vector<double> found;  // predicted step times, to know the keep-th best
  auto kth_best = [&] {
    if (request.keep <= 0 || static_cast<int>(found.size()) < request.keep) {
      return std::numeric_limits<double>::infinity();
    }
    std::nth_element(found.begin(), found.begin() + (request.keep - 1), found.end());
    return found[request.keep - 1];
  };
  std::set<std::tuple<int, int, int64_t, std::string>> fitted;  // (p, d, chunk, schedule)
  std::map<int, std::vector<std::string>> placed;  // world -> rank machines
  for (const Option& option : options) {
    if (option.bound >= kth_best()) break;
    const auto shape = std::make_tuple(option.p, option.d, option.chunk, option.schedule);
    if (option.recompute && fitted.count(shape)) continue;
    const int world = option.p * option.d;
    auto machines = placed.find(world);
    if (machines == placed.end()) machines = placed.emplace(world, PlaceRanks(request.machines, world)).first;
    SimulationInput in;
    in.profile = &profile;
    in.global_batch = batch;
    in.rank_machines = machines->second;
    in.candidate.stages = option.p;
    in.candidate.replicas = option.d;
    in.candidate.chunk_size = option.chunk;
    in.candidate.schedule = option.schedule;
    in.candidate.recompute = option.recompute;
    in.candidate.partition = option.partition;
    Result<Prediction> prediction = Simulate(in);
    if (!prediction.ok()) return prediction.status();
    ++result.simulated;
    // Memory, machine by machine.
    std::map<std::string, int64_t> used;
    for (size_t r = 0; r < in.rank_machines.size(); ++r) used[in.rank_machines[r]] += prediction->memory_bytes[r];
    bool fits = true;
    for (const MachineSlots& m : request.machines) {
      const int64_t capacity = profile.Machine(m.address).memory_bytes;
      if (capacity > 0 && used[m.address] > capacity) fits = false;
    }
    if (!fits) {
      ++result.too_big;
      continue;
    }
    if (!option.recompute) fitted.insert(shape);
    PlannedShape planned;
    planned.candidate = in.candidate;
    planned.idle_slots = slots - world;
    planned.prediction = std::move(prediction).value();
    found.push_back(planned.prediction.step_s);
    result.candidates.push_back(std::move(planned));
  }
  result.considered = static_cast<int>(options.size());
  if (result.candidates.empty()) {
    if (result.too_big > 0) {
      return Status::NotFound("none of the " + std::to_string(result.simulated) +
                              " shapes simulated fits the machines' memory: add machines or "
                              "memory, or use a smaller batch");
    }
    return Status::InvalidArgument("no shape of a batch of " + std::to_string(batch) + " fits " +
                                   std::to_string(slots) + " slots" +
                                   (request.stages > 0 ? " with --nstages " +
                                                             std::to_string(request.stages)
                                                       : std::string()) +
                                   ": leave out --nstages and --chunk-size, or give more slots");
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
