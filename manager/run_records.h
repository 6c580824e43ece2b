// The records the manager writes to the run directory, built in one place so that their
// fields (docs/mitra-run.md) are easy to find and keep stable. Pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/json.h"
#include "contract/worker_messages.h"
#include "launcher/process_runner.h"
#include "manager/progress.h"
#include "planner/grid.h"
#include "records/records.h"

namespace mitra::manager {

using planner::GridPlan;

// events.jsonl "launch": the shape and every rank's pid (0 for a rank that did not start); the
// loop adds where each rank runs.
records::Launch LaunchRecord(const GridPlan& plan, int64_t generation, const std::string& program,
                        const std::vector<int64_t>& pids, double launch_s);

// events.jsonl "worker_exit": how a rank ended; `stopped_record` says whether it printed its
// `stopped` line first.
JsonObject WorkerExitRecord(int rank, int pid, const launcher::ExitStatus& exit,
                            bool stopped_record, double after_s);

// metrics.jsonl: the worker's step record (`more`: the fields its kind does not name, which
// pass through) without "event", with the shape filled in where the worker left it out
// (RunJournal adds "time").
JsonObject MetricsRecord(const contract::message::Step& step, const JsonObject& more,
                         const GridPlan& plan, int64_t generation);

// What state.json says besides the fixed fields of the run.
struct StateSnapshot {
  std::string state;   // as records::State::state
  std::string reason;  // why it failed or stopped, or why it waits
  int64_t step = 0;
  int64_t max_steps = 0;
  std::optional<StepRecord> last_step;
  int ready_workers = 0;
  int running_workers = 0;
  std::vector<int64_t> pids;  // of the running workers
  double elapsed_s = 0;
  double updated_at = 0;  // Unix seconds
};

// state.json: its state and reason, the job as started, the shape and the snapshot.
JsonObject StateRecord(const records::Job& job, const GridPlan& plan, int64_t generation,
                       const StateSnapshot& snapshot);

}  // namespace mitra::manager
