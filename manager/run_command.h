// `mitra run`: from checked flags to a finished job.
//
//   1. read the machine list, resolve the program, check the shape that can be checked
//      without the program (P <= slots, B >= D) and the run directory;
//   2. run the program once with MITRA_DESCRIBE=1 to learn its segment count, plan the grid;
//   3. create the run directory, launch the workers and supervise them (supervisor.h).
// Any problem in 1 or 2 is bad input: a message, exit code 2, and nothing started or created.
#pragma once

#include <functional>
#include <ostream>
#include <string>

#include "common/clock.h"
#include "common/file_system.h"
#include "launcher/process_runner.h"
#include "manager/events.h"
#include "manager/run_options.h"
#include "manager/worker_env.h"

namespace mitra::manager {

// The outside world, as RunCommand sees it; main() builds the real one. Pointers must
// outlive the call.
struct RunContext {
  FileSystem* fs = nullptr;
  Clock* clock = nullptr;
  launcher::ProcessRunner* runner = nullptr;  // for localhost machines
  EventQueue* events = nullptr;               // StopRequested arrives here from signals
  std::function<Result<int>()> pick_port;     // a free port for the rendezvous store
  Environment environment;                    // the manager's own environment
  std::string working_directory;              // absolute; relative paths start here
  int manager_pid = 0;
  std::ostream* out = nullptr;  // progress and summaries
  std::ostream* err = nullptr;  // errors and warnings
};

// Exit codes of mitra run.
inline constexpr int kExitOk = 0;        // done, or stopped on request
inline constexpr int kExitFailed = 1;    // a worker failed, or the manager could not go on
inline constexpr int kExitBadInput = 2;  // flags, machine list, program: nothing was started

// Runs the job described by `options`; returns the process exit code. Blocks until the job
// ends.
int RunCommand(const RunOptions& options, RunContext& context);

}  // namespace mitra::manager
