#include "planner/planner.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "planner/grid.h"
#include "planner/shape_options.h"
#include "planner/shape_search.h"

namespace mitra::planner {
namespace {

int TotalSlots(const std::vector<MachineSlots>& machines) {
  int slots = 0;
  for (const MachineSlots& m : machines) slots += m.slots;
  return slots;
}

// What makes `request` unplannable on `slots` slots before any shape is tried, naming the flag
// to change.
Status CheckRequest(const PlanRequest& request, int slots) {
  if (request.profile == nullptr || request.profile->machines.empty()) {
    return Status::InvalidArgument("no profile to plan from: run `mitra profile` first");
  }
  const int64_t batch = request.global_batch;
  const int segments = request.profile->num_segments();
  if (slots < 1) return Status::InvalidArgument("no slots to plan for: list machines with slots");
  if (batch < 1) return Status::InvalidArgument("the batch must be at least 1 sample");
  if (request.chunk_size > batch) {
    return Status::InvalidArgument("micro-batches of " + std::to_string(request.chunk_size) +
                                   " samples (--chunk-size) are more than the batch of " +
                                   std::to_string(batch) + ": give --chunk-size " +
                                   std::to_string(batch) + " or less, or a larger --batch-size");
  }
  if (request.stages > segments) {
    return Status::InvalidArgument("--nstages " + std::to_string(request.stages) +
                                   " is more than the " + std::to_string(segments) +
                                   " segments of the profiled program");
  }
  return Status::Ok();
}

// Why no shape is left: none simulated fits memory (NotFound), or none could be formed.
Status NoShapeFits(const PlanRequest& request, const PlanResult& result, int slots) {
  if (result.too_big > 0) {
    return Status::NotFound("none of the " + std::to_string(result.simulated) +
                            " shapes simulated fits the machines' memory: add machines or "
                            "memory, or use a smaller batch");
  }
  return Status::InvalidArgument(
      "no shape of a batch of " + std::to_string(request.global_batch) + " fits " +
      std::to_string(slots) + " slots" +
      (request.stages > 0 ? " with --nstages " + std::to_string(request.stages) : std::string()) +
      ": leave out --nstages and --chunk-size, or give more slots");
}

// Fastest first; among equals, more idle slots first.
void RankByStepTime(std::vector<PlannedShape>* shapes) {
  std::stable_sort(shapes->begin(), shapes->end(),
                   [](const PlannedShape& a, const PlannedShape& b) {
                     if (a.prediction.step_s != b.prediction.step_s) {
                       return a.prediction.step_s < b.prediction.step_s;
                     }
                     return a.idle_slots > b.idle_slots;
                   });
}

}  // namespace

std::vector<std::string> PlaceRanks(const std::vector<MachineSlots>& machines, int world) {
  std::vector<std::string> out;
  for (int m : RankMachines(SlotsOf(machines), world)) out.push_back(machines[m].address);
  return out;
}

std::vector<double> RelativeSpeeds(const Profile& profile,
                                   const std::vector<MachineSlots>& machines) {
  const int64_t size = profile.micro_batches.empty() ? 1 : profile.micro_batches.back();
  std::vector<double> seconds;
  double fastest = 0;
  for (const MachineSlots& m : machines) {
    double s = 0;
    for (int segment = 0; segment < profile.num_segments(); ++segment) {
      const SegmentCost cost = profile.CostAt(profile.Machine(m.address), segment, size);
      s += cost.forward_s + cost.backward_s;
    }
    seconds.push_back(s);
    if (s > 0 && (fastest == 0 || s < fastest)) fastest = s;
  }
  std::vector<double> speeds;
  for (const double s : seconds) speeds.push_back(s > 0 ? fastest / s : 0);
  return speeds;
}

std::vector<std::vector<int>> MachineOrders(const Profile& profile,
                                            const std::vector<MachineSlots>& machines) {
  std::vector<int> list(machines.size());
  std::iota(list.begin(), list.end(), 0);
  std::vector<std::vector<int>> orders = {list};
  const std::vector<double> speed = RelativeSpeeds(profile, machines);
  if (std::all_of(speed.begin(), speed.end(), [](double s) { return s >= 0.95; })) return orders;
  std::vector<int> fastest_first = list;
  std::stable_sort(fastest_first.begin(), fastest_first.end(),
                   [&](int a, int b) { return speed[a] > speed[b]; });
  std::vector<int> alternating;
  for (size_t front = 0, back = list.size(); front < back;) {
    alternating.push_back(fastest_first[front++]);
    if (front < back) alternating.push_back(fastest_first[--back]);
  }
  for (const std::vector<int>& order : {fastest_first, alternating}) {
    if (std::find(orders.begin(), orders.end(), order) == orders.end()) orders.push_back(order);
  }
  return orders;
}

std::vector<MachineSlots> InOrder(const std::vector<MachineSlots>& machines,
                                  const std::vector<int>& order) {
  if (order.empty()) return machines;
  std::vector<MachineSlots> out;
  for (const int m : order) out.push_back(machines[m]);
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
  const int slots = TotalSlots(request.machines);
  if (Status checked = CheckRequest(request, slots); !checked.ok()) return checked;
  PlanResult all;
  for (const std::vector<int>& order : MachineOrders(*request.profile, request.machines)) {
    PlanRequest ordered = request;
    ordered.machines = InOrder(request.machines, order);
    const std::vector<detail::ShapeOption> options = detail::EnumerateShapeOptions(ordered, slots);
    Result<PlanResult> result = detail::SearchShapes(ordered, options, slots);
    if (!result.ok()) return result.status();
    const bool list_order = std::is_sorted(order.begin(), order.end());
    all.considered += static_cast<int>(options.size());
    all.simulated += result->simulated;
    all.too_big += result->too_big;
    for (PlannedShape& shape : result->candidates) {
      if (!list_order) shape.machine_order = order;
      all.candidates.push_back(std::move(shape));
    }
  }
  if (all.candidates.empty()) return NoShapeFits(request, all, slots);
  RankByStepTime(&all.candidates);  // stable: list order first among equals
  return all;
}

}  // namespace mitra::planner
