// ProfileCheck: a planned generation's measured step time against the planner's prediction.
//
// `mitra profile` measures once and the job plans from it at every launch; a machine that turned
// slower (other work on it) or a figure the profile got wrong (how the processes share the
// cores) shows as steps slower or faster than predicted. Observe() leaves out the generation's
// first kWarmUpSteps (caches, allocations, the background checkpoint after a morph), takes the
// median of the next kMeasuredSteps, and then says once how it compares. Pure.
#pragma once

#include <optional>
#include <vector>

#include "planner/shape_policy.h"
#include "records/reader.h"

namespace mitra::manager {

class ProfileCheck {
 public:
  static constexpr int kWarmUpSteps = 3;
  static constexpr int kMeasuredSteps = 20;
  // Measured over predicted beyond this, either way, corrects the profile (the planner's own
  // error, docs/performance.md, stays within 10% for the shapes it picks).
  static constexpr double kDisagreement = 1.2;

  // `predicted_step_s` <= 0: a shape nobody predicted; Observe() never answers.
  explicit ProfileCheck(double predicted_step_s = 0) : predicted_s_(predicted_step_s) {}

  struct Verdict {
    double predicted_s = 0;
    double measured_s = 0;  // the median of kMeasuredSteps
    double ratio = 1;       // measured / predicted
    bool disagrees = false;
  };
  // One step's time (rank 0's). The verdict after the step that completes the measurement,
  // nullopt before and after.
  std::optional<Verdict> Observe(double step_s);

 private:
  double predicted_s_;
  int seen_ = 0;
  std::vector<double> times_;
};

// The speed corrections a run's earlier managers measured, from its events: each
// `profile_check`'s `corrections` and each `slow_machine`'s `busy` and `factor` carry a
// correction as compounded then, so the newest of each machine and load is the one in force.
// A restarted manager plans from them, as the one before it would have.
std::vector<planner::SpeedCorrection> RecordedCorrections(
    const std::vector<records::EventRecord>& events);

}  // namespace mitra::manager
