// ShapePolicy: which shape (P stages x D replicas) the job takes on the machines it can use.
//
// The controller asks at every launch (the first one, each morph, each recovery) with the
// slots of the usable machines. This version has one policy, FixedStagesPolicy: P as the user
// set it (--nstages), D = floor(slots / P), the global batch unchanged. Choosing P as well
// (from profiles and a simulator, as Varuna's AutoConfig does) is another implementation of the
// same interface.
#pragma once

#include <cstdint>
#include <vector>

#include "mitra/common/status.h"
#include "planner/grid.h"

namespace mitra::planner {

struct ShapeRequest {
  std::vector<int> slots_per_machine;  // of the usable machines, in list order
  int segments = 0;                    // the program's segment count
  int64_t global_batch = 0;            // B: the same in every shape
  int chunk_size = 0;                  // 0: the default for each shape
};

// Implementations are pure and thread-compatible.
class ShapePolicy {
 public:
  virtual ~ShapePolicy() = default;
  // The plan for `request`, or a Status whose message says why none fits and what would help
  // (the job waits, and `mitra status` shows the message).
  virtual Result<GridPlan> Plan(const ShapeRequest& request) const = 0;
};

// P fixed; D = floor(slots / P).
class FixedStagesPolicy : public ShapePolicy {
 public:
  explicit FixedStagesPolicy(int stages) : stages_(stages) {}
  Result<GridPlan> Plan(const ShapeRequest& request) const override;

 private:
  int stages_;
};

}  // namespace mitra::planner
