// The inputs of `mitra run` checked before anything starts (steps 1 and 3 of RunCommand,
// run_command.h): the machine list, the launcher, the program, the thread count and timeout,
// the shape as far as it can be checked without the program, --profile, the run and checkpoint
// directories, and every SSH machine once. An error is bad input: its message names the thing
// and the fix.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cli/run_options.h"
#include "manager/machine_list.h"
#include "mitra/common/status.h"
#include "planner/grid.h"
#include "planner/profile.h"

namespace mitra::cli {

struct RunContext;  // run_command.h

// Step 1: everything that can be checked without running the program.
struct CheckedInputs {
  manager::MachineList machines;
  std::string machines_text;  // the list file as read, for its watcher ("" for Slurm's)
  std::string machines_path;  // absolute, or run::kSlurmMachines
  bool slurm = false;         // --machines slurm: the allocation's nodes, fixed
  std::string program;        // resolved (ProcessRunner::ResolveProgram)
  int threads = 1;            // --threads, MITRA_THREADS or 1
  double timeout_s = 30;      // --timeout, MITRA_TIMEOUT_S or 30
  bool planned = false;       // no --nstages: the planner chooses every shape
  std::shared_ptr<const planner::Profile> profile;  // --profile; null: none given
  std::string run_dir;         // absolute
  std::string checkpoint_dir;  // absolute
};
// Reads the machine list (or the Slurm allocation) and checks the launcher, the thread count,
// the timeout, the program, the shape so far, --profile and the run directory; then starts
// serving the metrics (RunContext::serve_metrics).
Result<CheckedInputs> CheckInputs(const RunOptions& options, RunContext& c);

// The grid request every listed machine allows, before the program has said how many segments
// it has (assumed: as many as stages; checked once it has described itself).
planner::GridRequest GridRequestFor(const RunOptions& options, const manager::MachineList& machines,
                                    bool planned);

// Step 3: the control socket's path (it must fit a socket address), then every SSH machine
// once, in parallel: one that refuses the manager (host key, login) is bad input; the addresses
// of those that cannot be reached now are returned (they start out of the job and join once
// they pass a check). Last the checkpoint directory, which this creates.
Result<std::vector<std::string>> CheckMachines(const CheckedInputs& inputs, RunContext& c);

}  // namespace mitra::cli
