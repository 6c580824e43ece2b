#include "planner/shape_policy.h"

#include <numeric>
#include <string>

namespace mitra::planner {

Result<GridPlan> FixedStagesPolicy::Plan(const ShapeRequest& request) const {
  const int slots =
      std::accumulate(request.slots_per_machine.begin(), request.slots_per_machine.end(), 0);
  if (slots < stages_) {
    const std::string stages = stages_ == 1 ? "1 stage needs 1 slot"
                                            : std::to_string(stages_) + " stages need " +
                                                  std::to_string(stages_) + " slots";
    return Status::Unavailable(stages + " and " + std::to_string(slots) + " usable slot" +
                               (slots == 1 ? " is" : "s are") + " listed");
  }
  GridRequest grid;
  grid.slots_per_machine = request.slots_per_machine;
  grid.stages = stages_;
  grid.segments = request.segments;
  grid.global_batch = request.global_batch;
  grid.chunk_size = request.chunk_size;
  return PlanGrid(grid);
}

}  // namespace mitra::planner
