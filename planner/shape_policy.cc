#include "planner/shape_policy.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "planner/planner.h"

namespace mitra::planner {

Result<GridPlan> FixedStagesPolicy::Plan(const ShapeRequest& request) const {
  const std::vector<int> slots_per_machine = SlotsOf(request.machines);
  const int slots = std::accumulate(slots_per_machine.begin(), slots_per_machine.end(), 0);
  if (slots < stages_) {
    const std::string stages = stages_ == 1 ? "1 stage needs 1 slot"
                                            : std::to_string(stages_) + " stages need " +
                                                  std::to_string(stages_) + " slots";
    return Status::Unavailable(stages + " and " + std::to_string(slots) + " usable slot" +
                               (slots == 1 ? " is" : "s are") + " listed");
  }
  GridRequest grid;
  grid.slots_per_machine = slots_per_machine;
  grid.stages = stages_;
  grid.segments = request.segments;
  grid.global_batch = request.global_batch;
  grid.chunk_size = request.chunk_size;
  grid.chunk_kept = request.chunk_kept;
  return PlanGrid(grid);
}

Profile Corrected(const Profile& profile, const std::vector<SpeedCorrection>& corrections) {
  Profile out = profile;
  for (const SpeedCorrection& c : corrections) {
    if (out.machines.empty() || c.busy < 1 || !(c.factor > 0)) continue;
    auto m = std::find_if(out.machines.begin(), out.machines.end(),
                          [&](const MachineProfile& p) { return p.address == c.address; });
    const MachineProfile& typical = m == out.machines.end() ? out.machines.front() : *m;
    if (c.busy > 1 && c.busy > static_cast<int>(typical.speed.size())) continue;
    if (m == out.machines.end()) {
      MachineProfile copy = typical;  // as Profile::Machine costs it
      copy.address = c.address;
      out.machines.push_back(std::move(copy));
      m = out.machines.end() - 1;
    }
    // One process's speed is its figures themselves (speed[0] is 1 by definition).
    if (c.busy == 1) {
      ScaleCompute(*m, c.factor);
    } else {
      m->speed[c.busy - 1] /= c.factor;
    }
  }
  return out;
}

namespace {

// Each rank's compute a step as `profile` predicts it: the forward and backward of its stage's
// segments (under interleaved and ZB-V, of each virtual stage the rank runs) over its replica's
// samples (its pipeline's partition), at its machine's speed with the plan's ranks there busy.
// Empty when the candidate's partition is not a split into the schedule's ranges.
std::vector<double> ExpectedCompute(const Profile& profile, const GridPlan& plan,
                                    const Candidate& candidate,
                                    const std::vector<MachineSlots>& machines) {
  const ChunkLayout layout = LayoutOf(plan.schedule.value_or(ScheduleKind::k1F1B), plan.stages,
                                      static_cast<int>(candidate.partition.size()));
  if (static_cast<int>(candidate.partition.size()) != layout.num_virtual_stages()) return {};
  std::vector<int> busy(machines.size(), 0);
  for (const RankPlacement& r : plan.ranks) ++busy[r.machine];
  std::vector<double> out;
  for (const RankPlacement& r : plan.ranks) {
    const std::vector<int>& partition = candidate.PartitionOf(r.replica);
    std::vector<int> first_segment(partition.size() + 1, 0);
    std::partial_sum(partition.begin(), partition.end(), first_segment.begin() + 1);
    const MachineProfile& machine = profile.Machine(machines[r.machine].address);
    double micro_batch_s = 0;
    for (int v = 0; v < layout.num_virtual_stages(); ++v) {
      if (layout.StageOf(v) != r.stage) continue;
      for (int s = first_segment[v]; s < first_segment[v + 1]; ++s) {
        const SegmentCost c = profile.CostAt(machine, s, plan.chunk_size);
        micro_batch_s += c.forward_s + c.backward_s;
      }
    }
    const int64_t samples =
        ShareOf(plan.global_batch, plan.chunk_size, plan.shares, plan.replicas, r.replica).samples;
    out.push_back(micro_batch_s * static_cast<double>(samples) / plan.chunk_size /
                  machine.SpeedAt(busy[r.machine]));
  }
  return out;
}

// The machines `plan` runs ranks on that `profile` has no figures of, once each, in rank order.
std::vector<std::string> Unmeasured(const Profile& profile, const GridPlan& plan,
                                    const std::vector<MachineSlots>& machines) {
  std::vector<std::string> out;
  for (const RankPlacement& r : plan.ranks) {
    const std::string& address = machines[r.machine].address;
    const bool known = std::any_of(profile.machines.begin(), profile.machines.end(),
                                   [&](const MachineProfile& m) { return m.address == address; });
    if (!known && std::find(out.begin(), out.end(), address) == out.end()) out.push_back(address);
  }
  return out;
}

}  // namespace

Result<GridPlan> PlannedShapePolicy::Plan(const ShapeRequest& request) const {
  const Profile corrected =
      request.corrections.empty() ? Profile() : Corrected(*profile_, request.corrections);
  PlanRequest plan;
  plan.profile = request.corrections.empty() ? profile_.get() : &corrected;
  plan.global_batch = request.global_batch;
  plan.chunk_size = request.chunk_size;
  plan.chunk_kept = request.chunk_kept;
  plan.zero = request.zero;
  plan.stages = stages_;
  plan.machines = request.machines;
  if (profile_->num_segments() != request.segments) {
    return Status::InvalidArgument("the profile holds " + std::to_string(profile_->num_segments()) +
                                   " segments but the program has " +
                                   std::to_string(request.segments) +
                                   ": profile the program again (mitra profile)");
  }
  Result<PlanResult> planned = PlanShapes(plan);
  if (!planned.ok()) return Status::Unavailable(planned.status().message());
  const PlannedShape& best = planned->candidates.front();
  GridRequest grid;
  grid.slots_per_machine = SlotsOf(InOrder(request.machines, best.machine_order));
  grid.stages = best.candidate.stages;
  grid.replicas = best.candidate.replicas;
  grid.segments = request.segments;
  grid.global_batch = request.global_batch;
  grid.chunk_size = static_cast<int>(best.candidate.chunk_size);
  Result<GridPlan> out = PlanGrid(grid);
  if (!out.ok()) return out.status();
  // The grid filled the machines in the planner's order; the plan names them by list index.
  if (!best.machine_order.empty()) {
    for (RankPlacement& r : out->ranks) r.machine = best.machine_order[r.machine];
  }
  out->schedule = best.candidate.schedule;
  out->recompute = best.candidate.recompute;
  out->zero = best.candidate.zero && out->replicas > 1;
  out->partition = best.candidate.PartitionText();
  if (Uneven(best.candidate.shares)) out->shares = best.candidate.shares;
  out->predicted_step_s = best.prediction.step_s;
  out->predicted_memory_bytes = best.prediction.max_memory_bytes;
  out->expected_compute_s = ExpectedCompute(*plan.profile, *out, best.candidate,
                                            request.machines);
  out->unmeasured = Unmeasured(*plan.profile, *out, request.machines);
  if (out->idle_slots > 0 && out->idle_reason.empty()) {
    out->idle_reason = "the planner predicts " + std::to_string(out->replicas) +
                       (out->replicas == 1 ? " replica" : " replicas") + " to be fastest";
  }
  return out;
}

}  // namespace mitra::planner
