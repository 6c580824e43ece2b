// `mitra plan --validate`: the simulator's prediction of a step of a generation that a run
// directory recorded, beside what the run measured: the step (its median), each stage's
// compute and each kind of instruction (from the ranks' traced steps).
//
// Reads through the FileSystem seam; plain values otherwise.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/file_system.h"
#include "mitra/common/status.h"
#include "planner/planner.h"

namespace mitra::report {

// Where one step's time went: by kind of instruction ("F", "Bi", "reduce"), and the compute of
// each stage (all its replicas).
struct StepSplit {
  struct Spent {
    double total_s = 0;
    int count = 0;
  };
  std::map<std::string, Spent> by_kind;
  std::vector<Spent> compute_by_stage;

  explicit StepSplit(int stages = 0) : compute_by_stage(stages) {}
  void Add(const std::string& name, int stage, double seconds);
};

struct PlanValidation {
  std::string run_dir;
  int64_t generation = 0;
  planner::Candidate shape;
  double predicted_step_s = 0;
  double measured_step_s = 0;  // the median step, the first two (warm-up) left out
  size_t measured_steps = 0;   // how many that median is of
  StepSplit predicted, measured;
  int traced_ranks = 0;  // whose traces `measured` is of; 0: none (only local workers trace)
};

// The generation `generation` (-1: the newest) of the run in `run_dir`, simulated with the
// profile at `profile_path` (a profile.json or its directory). InvalidArgument naming what is
// missing: the generation's launch, its workers' settings, the profile.
Result<PlanValidation> ValidatePlan(FileSystem& fs, const std::string& run_dir,
                                    int64_t generation, const std::string& profile_path);

// What `mitra plan --validate` prints, lines ending in '\n'.
std::string FormatPlanValidation(const PlanValidation& validation);

}  // namespace mitra::report
