// ProfileJob: runs a training program once per slot of a machine list in profiling mode
// (worker/profiler.h) and assembles what its processes report into a planner::Profile.
//
// Used by `mitra profile` and by `mitra run` without --nstages when it has no profile yet.
// Blocks until every process has exited (or the limit passes, then kills them).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/file_system.h"
#include "manager/machine_list.h"
#include "mitra/common/status.h"
#include "planner/profile.h"
#include "run/transports.h"
#include "run/worker_env.h"

namespace mitra::run {

struct ProfileJobOptions {
  WorkerProgram worker;
  int64_t global_batch = 0;
  std::vector<int64_t> micro_batches = {1, 2, 4, 8, 16};  // larger than the batch: left out
  int repeats = 5;
  int threads = 1;
  double timeout_s = 600;  // each wait of the workers
  double limit_s = 1800;   // the whole profile
  std::string log_dir;     // one log per rank; "": none
};

// The profile, or an error naming the rank that failed and quoting its last output.
Result<planner::Profile> ProfileProgram(Transports& transports, const manager::MachineList& machines,
                                        const ProfileJobOptions& options, Clock& clock);

// A profile written by `mitra profile`: DIR/profile.json, or the file itself when a file is
// given. InvalidArgument naming the fix when there is none, or what is wrong in it.
Result<planner::Profile> LoadProfile(FileSystem& fs, const std::string& path);

}  // namespace mitra::run
