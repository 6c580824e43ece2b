// The environment each worker starts with: the manager's own, minus any stale MITRA_*
// variables of the worker contract, plus the worker's place in the job
// (docs/worker-contract.md).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mitra/contract/placement.h"
#include "planner/grid.h"

namespace mitra::run {

using planner::GridPlan;
using planner::RankPlacement;

using contract::Environment;

// A manager's placement before the rank and the plan are known: no checkpoints unless asked,
// the newest 3 kept (a program run alone keeps its own settings instead), and a new job token
// (docs/security.md), the job's for its whole life.
contract::Placement JobPlacement();

// The variables of a worker's environment that are secrets (the job token): what a
// ProcessSpec's `secrets` names.
std::vector<std::string> SecretVariables();

// What is the same for every rank of one launch: the job's part of each rank's placement
// (rendezvous, generation, steps, threads, timeouts, run and checkpoint directories, park,
// precision; WorkerEnvironment adds the rank's and the plan's part), and where the ranks write
// their step traces.
struct LaunchSettings {
  contract::Placement placement = JobPlacement();
  std::string trace_dir;  // where each rank writes one step's trace; "": none
};

// `base` without the contract's variables (a MITRA_RANK left in the user's shell must not
// reach a worker), plus every variable of the contract for rank `placement.rank`. `host` is
// the address the worker binds Gloo to (MITRA_HOST).
Environment WorkerEnvironment(const Environment& base, const GridPlan& plan,
                              const RankPlacement& placement, const std::string& host,
                              const LaunchSettings& settings);

// What of the manager's environment travels to a worker on another machine: PATH and the
// locale, library and thread settings (LD_LIBRARY_PATH, GLIBC_TUNABLES, LANG, LC_*, TZ, OMP_*,
// MKL_*, OPENBLAS_*, GLOO_*, NCCL_*, CUDA_*, MITRA_*), not the rest (HOME, USER, SSH_*, DISPLAY, ...
// belong to the other machine). --env adds to it.
Environment RemoteEnvironment(const Environment& base);

// The training program and how its processes start, the same for every launch of `mitra run`
// and for `mitra profile`.
struct WorkerProgram {
  std::string program;  // resolved
  std::vector<std::string> args;
  Environment local_environment;   // the manager's, plus --env
  Environment remote_environment;  // RemoteEnvironment(the manager's), plus --env
  std::string working_directory;   // of local workers
  std::string code_dir;            // of SSH workers; "": working_directory

  // `overrides` (--env KEY=VALUE) win over what the manager's environment gives. Both
  // environments also ask glibc for a heap on huge pages (GLIBC_TUNABLES gains
  // glibc.malloc.hugetlb=1) unless they already say how, or MITRA_MALLOC_TUNING=0.
  static WorkerProgram Make(std::string program, std::vector<std::string> args,
                            const Environment& manager,
                            const std::vector<std::pair<std::string, std::string>>& overrides,
                            std::string working_directory, std::string code_dir);
  const Environment& EnvironmentFor(bool local) const {
    return local ? local_environment : remote_environment;
  }
  const std::string& DirectoryFor(bool local) const {
    return local || code_dir.empty() ? working_directory : code_dir;
  }
};

// `base` without the contract's variables, plus MITRA_DESCRIBE=1.
Environment DescribeEnvironment(const Environment& base);

// `base` without the contract's variables, plus MITRA_STANDBY=1 and the run directory: a worker
// started ahead of a grow, told its place later (contract/park.h); with MITRA_STANDBY_STAGE when
// the `stage` it is meant for is known.
Environment StandbyEnvironment(const Environment& base, const std::string& run_dir,
                               const std::optional<contract::StandbyStage>& stage = std::nullopt);

}  // namespace mitra::run
