// ShapePolicy: which shape (P stages x D replicas) the job takes on the machines it can use.
//
// The controller asks at every launch (the first one, each morph, each recovery) with the
// usable machines. FixedStagesPolicy: P as the user set it (--nstages), D = floor(slots / P) (at
// most the number of micro-batches), the global batch unchanged. PlannedShapePolicy: the planner's fastest shape for the machines
// (planner/planner.h): P, D, micro-batch, schedule and partition, from a profile.
#pragma once

#include <cstdint>
#include <vector>

#include <memory>
#include <string>

#include "mitra/common/status.h"
#include "planner/grid.h"
#include "planner/profile.h"

namespace mitra::planner {

// What a running job measured against the profile: on the machine `address`, with `busy` of
// its processes in the job, steps took `factor` times what the profile predicted. The plan
// divides that machine's speed with `busy` computing (MachineProfile::speed) by `factor`, and
// with one computing, multiplies its figures (ScaleCompute): a step's time is mostly
// computation, which the speed scales.
struct SpeedCorrection {
  std::string address;
  int busy = 1;
  double factor = 1;
};

struct ShapeRequest {
  std::vector<MachineSlots> machines;  // the usable machines, in list order
  int segments = 0;                    // the program's segment count
  int64_t global_batch = 0;            // B: the same in every shape
  int chunk_size = 0;                  // > 0: fixed for the job; 0: chosen for each shape
  bool chunk_kept = false;             // the chunk chosen now stays (GridRequest::chunk_kept)
  std::vector<SpeedCorrection> corrections;  // PlannedShapePolicy only
  std::optional<bool> zero;  // PlannedShapePolicy only: PlanRequest::zero
};

// `profile` with `corrections` applied, each to the machine of its address; a machine that was
// not profiled gets its own copy of the list's typical one (Profile::Machine) first, so that
// correcting it leaves the others as they were. One for a number of processes the profile did
// not measure is ignored.
Profile Corrected(const Profile& profile, const std::vector<SpeedCorrection>& corrections);

// Implementations are pure and thread-compatible.
class ShapePolicy {
 public:
  virtual ~ShapePolicy() = default;
  // The plan for `request`, or a Status whose message says why none fits and what would help
  // (the job waits, and `mitra status` shows the message).
  virtual Result<GridPlan> Plan(const ShapeRequest& request) const = 0;
  // Whether plans weigh the machines' speeds, so that a correction (a machine found slower than
  // planned) may change them.
  virtual bool WeighsSpeeds() const { return false; }
};

// P fixed; D = floor(slots / P).
class FixedStagesPolicy : public ShapePolicy {
 public:
  explicit FixedStagesPolicy(int stages) : stages_(stages) {}
  Result<GridPlan> Plan(const ShapeRequest& request) const override;

 private:
  int stages_;
};

// The planner's fastest shape on the usable machines, re-planned at every launch, from the
// profile as the request's corrections leave it; of `stages` stages when that is > 0 (--nstages
// with --profile). The plan carries the schedule, partition, shares and prediction to the
// workers and the records, and places the ranks on the machines in the planner's order.
class PlannedShapePolicy : public ShapePolicy {
 public:
  explicit PlannedShapePolicy(std::shared_ptr<const Profile> profile, int stages = 0)
      : profile_(std::move(profile)), stages_(stages) {}
  Result<GridPlan> Plan(const ShapeRequest& request) const override;
  bool WeighsSpeeds() const override { return true; }

 private:
  std::shared_ptr<const Profile> profile_;
  int stages_;
};

}  // namespace mitra::planner
