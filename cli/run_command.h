// `mitra run`: from checked flags to a finished job.
//
//   1. read the machine list, resolve the program, check the shape that can be checked
//      without the program (P <= slots, B >= D) and the run directory;
//   2. run the program once with MITRA_DESCRIBE=1 to learn its segment count, plan the grid;
//   3. create the run directory and run the job: launch, morph, recover (run_loop.h).
// Any problem in 1 or 2 is bad input: a message, exit code 2, and nothing started or created.
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/file_system.h"
#include "contract/exit_codes.h"
#include "launcher/process_runner.h"
#include "run/events.h"
#include "run/run_observer.h"
#include "cli/run_options.h"
#include "run/transports.h"
#include "run/worker_env.h"

namespace mitra::run {
class RunLoop;
struct RunLoopOptions;
}  // namespace mitra::run

namespace mitra::cli {


// The outside world, as RunCommand sees it; main() builds the real one. Pointers must
// outlive the call.
struct RunContext {
  FileSystem* fs = nullptr;
  Clock* clock = nullptr;
  launcher::ProcessRunner* runner = nullptr;  // local processes: the program's describe step
  run::Transports* transports = nullptr;           // the workers' machines
  run::EventQueue* events = nullptr;  // signals, list edits, `mitra stop` arrive here
  // Called with the loop once it exists and with nullptr when it is over (the control socket
  // asks it for the status meanwhile). May be empty.
  std::function<void(run::RunLoop*)> on_loop_started;
  // Adjusts the loop's options just before the loop is made: tests put its seams on a
  // simulation here (tests/run/fake_transports.h). May be empty.
  std::function<void(run::RunLoopOptions*)> prepare_loop;
  // Makes this manager the only one on the run directory (its control socket); an error names
  // the manager already there. Called once every input is checked. May be empty.
  std::function<Status(const std::string& run_dir)> claim_run_dir;
  // Starts watching the machine list at `path`, whose `contents` were just read: every later
  // change arrives on `events` as MachineListEdited. May be empty (the list is read once).
  std::function<Status(const std::string& path, const std::string& contents)>
      watch_machine_list;
  // Told every record of the run and the machines' states: the Prometheus metrics
  // (metrics.h, --metrics-port). May be null.
  run::RunObserver* observer = nullptr;
  // Starts serving the metrics (--metrics-port); called once the flags, the machine list and
  // the program are checked, before the program is run to describe itself. An error (a port
  // taken) is bad input. May be empty.
  std::function<Status()> serve_metrics;
  // Expands a Slurm host list for `--machines slurm`; empty: `scontrol show hostnames`.
  std::function<Result<std::vector<std::string>>(const std::string& host_list)>
      expand_slurm_nodes;
  contract::Environment environment;                    // the manager's own environment
  std::string working_directory;              // absolute; relative paths start here
  int manager_pid = 0;
  std::ostream* out = nullptr;  // progress and summaries
  std::ostream* err = nullptr;  // errors and warnings
};

// Runs the job described by `options`; returns the process exit code. Blocks until the job
// ends.
int RunCommand(const RunOptions& options, RunContext& context);

}  // namespace mitra::cli
