#include "planner/shape_policy.h"

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
    // The machine whose figures the plan uses for `address` (Profile::Machine).
    MachineProfile* m = out.machines.empty() ? nullptr : &out.machines.front();
    for (MachineProfile& candidate : out.machines) {
      if (candidate.address == c.address) m = &candidate;
    }
    if (m == nullptr || c.busy < 1 || c.busy > static_cast<int>(m->speed.size()) ||
        !(c.factor > 0)) {
      continue;
    }
    m->speed[c.busy - 1] /= c.factor;
  }
  return out;
}

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
  grid.slots_per_machine = SlotsOf(request.machines);
  grid.stages = best.candidate.stages;
  grid.replicas = best.candidate.replicas;
  grid.segments = request.segments;
  grid.global_batch = request.global_batch;
  grid.chunk_size = static_cast<int>(best.candidate.chunk_size);
  Result<GridPlan> out = PlanGrid(grid);
  if (!out.ok()) return out.status();
  out->schedule = best.candidate.schedule;
  out->recompute = best.candidate.recompute;
  out->zero = best.candidate.zero && out->replicas > 1;
  out->partition = best.candidate.PartitionText();
  if (Uneven(best.candidate.shares)) out->shares = best.candidate.shares;
  out->predicted_step_s = best.prediction.step_s;
  out->predicted_memory_bytes = best.prediction.max_memory_bytes;
  if (out->idle_slots > 0 && out->idle_reason.empty()) {
    out->idle_reason = "the planner predicts " + std::to_string(out->replicas) +
                       (out->replicas == 1 ? " replica" : " replicas") + " to be fastest";
  }
  return out;
}

}  // namespace mitra::planner
