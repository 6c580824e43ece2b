// How the planner (planner/planner.h) simulates the shapes it considers: in the order of their
// bounds, until none left can enter the best `keep`, dropping those that do not fit the machines'
// memory. Internals of the planner, declared here so that they can be tested on their own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mitra/common/status.h"
#include "planner/planner.h"
#include "planner/shape_options.h"

namespace mitra::planner::detail {

// The keep-th best of the step times added so far; infinity while fewer were added, or for a
// keep of 0 or less (every shape is then simulated).
class KthBest {
 public:
  explicit KthBest(int keep) : keep_(keep) {}
  void Add(double step_s) { found_.push_back(step_s); }
  double Get();

 private:
  int keep_;
  std::vector<double> found_;
};

// Whether the ranks (rank r on machine rank_machines[r], an index into `capacity`, holding
// memory_bytes[r]) fit each machine's memory together; a machine of capacity 0 (it reports no
// memory) holds any. O(ranks + machines), no string compared: 10,000-slot plans ask it often.
bool FitsMemory(const std::vector<int64_t>& capacity, const std::vector<int>& rank_machines,
                const std::vector<int64_t>& memory_bytes);

// How many times UnevenShapes re-weighs the shares by the rates the last ones gave: a
// pipeline's fill and drain do not shrink with its share, so the first guess is refined.
inline constexpr int kShareRounds = 3;

// The shape of `even_input` (even shares, predicted as `even`) with each replica's share of the
// batch in proportion to its rate (micro-batches over its pipeline phase), re-weighed from each
// prediction up to kShareRounds times: the shapes simulated, their idle_slots unset. None when
// the replicas' rates are alike (like machines) or D is 1.
std::vector<PlannedShape> UnevenShapes(const SimulationInput& even_input, const Prediction& even);

// Simulates `options` (sorted by bound) for a checked `request` on `slots` slots: the shapes that
// fit, unranked, with PlanResult's counts but `considered`. An option with recomputation or
// ZeRO-1 (unless the request asks for it) only when the same shape without it does not fit; each
// shape that fits also with uneven shares (UnevenShapes). A simulation's error is returned as is.
Result<PlanResult> SearchShapes(const PlanRequest& request, const std::vector<ShapeOption>& options,
                                int slots);

}  // namespace mitra::planner::detail
