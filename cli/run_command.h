// `mitra run`: from checked flags to a finished job, in steps:
//
//   1. CheckInputs: read the machine list, resolve the program, check the shape that can be
//      checked without the program (P <= slots, B >= D) and the run directory;
//   2. DescribeAndPlan: run the program once with MITRA_DESCRIBE=1 to learn its segment count,
//      find the checkpoint it resumes from, plan the grid;
//   3. CheckMachines: check every SSH machine once, and that the checkpoint directory is
//      writable;
//   4. PrepareRunDir: claim the run directory, clean up after a manager that died on it, create
//      it and open its records; PlanFirstShape: a planned job's first shape, from its profile;
//   5. ControllerOptionsFor, LoopOptionsFor: what the controller and the loop are told;
//   6. run the job: launch, morph, recover (run_loop.h).
// Any problem before step 4 is bad input: a message, exit code 2, and no worker started and no
// run directory created (the metrics server a --metrics-port asked for is already serving, and
// the checkpoint directory exists). Each step is a function of its own below, testable alone.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "cli/run_inputs.h"
#include "cli/run_options.h"
#include "common/clock.h"
#include "common/file_system.h"
#include "contract/exit_codes.h"
#include "launcher/process_runner.h"
#include "manager/controller.h"
#include "manager/machine_list.h"
#include "planner/grid.h"
#include "planner/profile.h"
#include "planner/shape_policy.h"
#include "records/records.h"
#include "run/describe.h"
#include "run/events.h"
#include "run/run_dir.h"
#include "run/run_journal.h"
#include "run/run_loop.h"
#include "run/run_observer.h"
#include "run/transports.h"
#include "run/worker_env.h"

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

// ---- The steps of RunCommand -------------------------------------------------------------
// Each returns what the next steps need; an error Status says what is wrong and how to fix it
// (RunCommand prints it). None starts a worker or creates anything unless it says so. Steps 1
// and 3, CheckInputs and CheckMachines, are in run_inputs.h.

// 2. What the program says of itself, where the job resumes, and the grid.
struct ProgramPlan {
  run::ProgramDescription description;
  double describe_s = 0;  // how long the program took to describe itself
  // The grid on every listed machine (a planned job's first shape comes from PlanFirstShape).
  planner::GridPlan plan;
  int64_t resume_step = 0;  // the newest complete checkpoint's step; 0: a fresh start
  int64_t resume_chunk_size = 0;  // the micro-batch size that checkpoint was written with
  // The micro-batch size kept for the job when the model's results depend on it; 0: each
  // shape takes its own default.
  int chunk_size = 0;
  std::vector<std::string> reported;  // damaged checkpoints named on the terminal already
  // The speed corrections this run's earlier managers measured (its events.jsonl): a planned
  // job's plans start from them.
  std::vector<planner::SpeedCorrection> corrections;
};
// Runs the program with MITRA_DESCRIBE=1 (on RunContext::runner), finds the checkpoint it
// resumes from (another model's is refused) and plans the grid.
Result<ProgramPlan> DescribeAndPlan(const RunOptions& options, const CheckedInputs& inputs,
                                    RunContext& c);

// Whether a stop arrived while the steps above ran; any other event is kept for the loop.
bool StopRequestedBeforeStart(RunContext& c);

// 4. The run directory made ready: claimed (RunContext::claim_run_dir), cleaned of a dead
// manager's workers, the machine list watched, logs/gen-G created and its records opened.
struct PreparedRunDir {
  int64_t first_generation = 0;  // the directory's next logs/gen-G
  std::unique_ptr<run::RunJournal> journal;
};
Result<PreparedRunDir> PrepareRunDir(const RunOptions& options, const CheckedInputs& inputs,
                                     const run::RunDir& run_dir, RunContext& c);

// A planned job's shape policy, and its first shape in `plan` (with the micro-batch size it
// picks, when the model's results depend on it): planned on the machines that answered, from
// --profile or the profile kept in the run directory, else one measured now. Null without
// planning (--nstages). An InvalidArgument error is bad input; any other is a failure.
Result<std::shared_ptr<const planner::ShapePolicy>> PlanFirstShape(
    const RunOptions& options, const CheckedInputs& inputs, const run::RunDir& run_dir,
    const std::vector<std::string>& unreachable, ProgramPlan* plan, RunContext& c);

// 5. What the controller is told: the shape's constraints, the timeouts the flags imply, the
// restart budget, the spares.
manager::ControllerOptions ControllerOptionsFor(
    const RunOptions& options, const CheckedInputs& inputs, const ProgramPlan& plan,
    std::shared_ptr<const planner::ShapePolicy> policy, int64_t first_generation);
// What the loop is told: the program and its environment, what every launch shares,
// the job as started (state.json's fixed fields), the preemption command, stragglers, regrouping.
run::RunLoopOptions LoopOptionsFor(const RunOptions& options, const CheckedInputs& inputs,
                                   const ProgramPlan& plan, int64_t first_generation,
                                   const records::Job& job, const RunContext& c);

}  // namespace mitra::cli
