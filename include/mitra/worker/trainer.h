// Trainer: the high-level training loop of a worker program.
//
//   int main(int argc, char** argv) {
//     ModelSpec spec = ...;  auto dataset = ...;  TrainerOptions options = ...;
//     return mitra::worker::Trainer(spec, dataset, options).Run();
//   }
//
// Run() reads the placement (Placement::FromEnvironment), answers the manager's describe
// request, restores the checkpoint it is told to resume from, trains steps
// [resume_step, max_steps), checkpoints every N steps and at the end, evaluates every N steps
// and at the end when given an evaluation dataset, and reports each step on stdout as an
// `@mitra {"event":"step",...}` record (rank 0) plus a human log line. SIGUSR1 (and SIGINT)
// ask for a stop: the wish is combined across ranks at the next step boundary, so every rank
// stops after the same step. A lost peer ends the worker with exit code 1 and a message naming
// it; bad configuration with exit code 2.
//
// After Run() returns the program may go on working (evaluate, export, save) as long as it
// needs: the manager knows from the `stopped` record that it finished training.
//
// A worker the manager can reach on its standard input (MITRA_PARK=1) does not exit when a
// morph asks it to stop (SIGUSR2): it parks (worker/parking.h) and, told its place in the next
// generation, trains again in the same process; Run() returns when it is told to exit. A
// worker started ahead of a grow (MITRA_STANDBY=1) parks before it trains at all.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "mitra/cutpoint/model.h"
#include "mitra/worker/checkpoint_options.h"
#include "mitra/worker/data.h"
#include "mitra/worker/runtime.h"

namespace mitra::worker {

class Checkpointer;
class Stage;
class StepTimes;
struct HeldState;
struct ResumeSummary;
struct ParkedHolding;

// Evaluation during training: a forward-only pass in evaluation mode over `dataset`, shared
// among the replicas, after every `every` steps and after the last one. The mean loss and the
// mean of each metric go to the manager (metrics.jsonl, the terminal) as an `eval` record.
struct EvalOptions {
  std::shared_ptr<const Dataset> dataset;  // null: no evaluation
  int64_t every = 0;        // 0: only after the last step
  int64_t max_samples = 0;  // evaluate samples [0, max_samples) only; 0: all of them
  int64_t chunk_size = 0;   // micro-batch of the pass; 0: the training one
  std::vector<std::pair<std::string, MetricFn>> metrics;  // name, sum over a micro-batch
};

// What a step hook (TrainerOptions::on_step) is told after each step the job trains.
struct StepInfo {
  int64_t step = 0;        // the job's completed steps, 1-based: the step just trained
  double loss = 0;         // its mean loss over the global batch (the same on every rank)
  double grad_norm = 0;    // before clipping
  double lr = 0;           // the learning rate it used
  double seconds = 0;      // its time on this rank
  int rank = 0;            // this process's place in the job's grid
  int stage = 0;
  int replica = 0;
  int stages = 1;          // the shape P x D it trained in
  int replicas = 1;
  int64_t generation = 0;  // the manager's generation (0 when run alone)
};

struct TrainerOptions {
  RuntimeOptions runtime;
  EvalOptions eval;
  int64_t max_steps = 100;    // overridden by the placement when the manager sets it
  int64_t log_every = 1;      // human log line every N steps (records are always written)
  std::string dump_params;    // after training, replica <dump_replica> of each stage writes its
                              // parameters and buffers to <dump_params>/stage-<s>.pt
                              // (torch.load-able dict)
  int dump_replica = 0;       // -1: every replica, to stage-<s>.replica-<r>.pt
  CheckpointOptions checkpoint;  // the placement's MITRA_CHECKPOINT_* settings override these
  // Called on every rank after every step, on the training thread, before the step's
  // checkpoint and evaluation; a step trained again after a failure is told again. What it
  // throws ends the worker as a failure. None by default.
  std::function<void(const StepInfo&)> on_step;
};

class Trainer {
 public:
  Trainer(cutpoint::ModelSpec spec, std::shared_ptr<const Dataset> dataset,
          TrainerOptions options);
  ~Trainer();

  // Returns the process exit code: 0 done or stopped, 1 failure, 2 bad configuration.
  int Run();

 private:
  // A standby worker (MITRA_STANDBY=1): parks before it has a place, then runs in the one it
  // is given.
  int RunStandby();
  // A standby worker's segments of the stage it is meant for (MITRA_STANDBY_STAGE), built
  // while it waits for its placement, into held_: off the path of the morph that keeps it.
  void BuildAhead();
  // Fills the process's checkpoint staging pool (worker/state/staging_pool.h) for `parameters` and
  // their optimizer state: the save right after the grow then copies into memory already paged
  // in. Blocks while it writes every page.
  void ReserveStaging(const std::vector<torch::Tensor>& parameters) const;
  // Trains in `placement` (and in the places it is given after it parks).
  int Run(Result<Placement> placement);
  // How a Train() ended: the process's exit code, and whether training stopped because the
  // manager asked (SIGUSR1) with everything on disk, after `step`: then the worker may park.
  struct Ended {
    int exit_code = 0;
    bool asked_to_stop = false;
    int64_t step = 0;
  };
  // `times` (may be null) gets every step's compute and wait time for the heartbeat. A worker
  // that parks keeps its state in held_; so does one that a peer's failure (PeerError) stops.
  Ended Train(const Placement& placement, StepTimes* times);
  Ended Train(const Placement& placement, Runtime& rt, StepTimes* times);
  // Where training starts: `step` (-1: it cannot, with `exit_code`), and whether the state
  // came from memory with no complete checkpoint of it on storage (`save`: write one now).
  struct Resumed {
    int64_t step = 0;
    int exit_code = 0;
    // The state came from memory and storage has no copy of it: the first step's is saved.
    bool save = false;
    // A resume from memory, reported once the state has arrived (ReportResume).
    std::shared_ptr<const ResumeSummary> summary = nullptr;
  };
  // Which step to start from: the placement's resume step, or for a program run alone, the
  // newest valid checkpoint in its checkpoint directory; and its state: a program run alone
  // restores the checkpoint, a worker of a managed job takes what it can from memory, its own
  // or its peers' (worker/state/state_exchange.h), the rest from the checkpoint.
  Resumed Resume(const Placement& placement, Runtime& rt, Checkpointer* checkpointer);
  Resumed RestoreFromCheckpoint(const Placement& placement, Runtime& rt,
                                Checkpointer* checkpointer, int64_t step);
  Resumed ResumeFromMemory(const Placement& placement, Runtime& rt, Checkpointer* checkpointer);
  // Where each rank's state came from and how fast it moved, once all of it has arrived (a
  // collective: every rank calls it after the first step): the log line and rank 0's
  // `restored` record.
  void ReportResume(const Placement& placement, Runtime& rt, ResumeSummary summary) const;
  // What held_ holds, for the parked record.
  ParkedHolding Holding() const;
  // Runs the evaluation after step `step` and reports it (rank 0).
  void Evaluate(Runtime& rt, int64_t step);
  // The runtime's options for `placement`: the program's, with the step and sample traces the
  // manager or the environment ask for.
  RuntimeOptions RuntimeOptionsFor(const Placement& placement) const;
  // The checkpoint settings: the program's, overridden by the placement's.
  CheckpointOptions CheckpointOptionsFor(const Placement& placement) const;
  // Logs the rank's place and prints its `ready` record (and rank 0's `settings`).
  void Announce(const Placement& placement, const Runtime& rt) const;
  // Rank 0's `step` record, the log line every log_every steps, and the program's step hook
  // (options_.on_step) on every rank.
  void ReportStep(const Placement& placement, const Runtime& rt, int64_t step,
                  const StepResult& r, double seconds) const;
  // --dump-params: the stage's parameters after training (the chosen replica's, or each).
  void DumpParameters(const Placement& placement, const Runtime& rt) const;

  cutpoint::ModelSpec spec_;
  std::shared_ptr<const Dataset> dataset_;
  TrainerOptions options_;
  std::unique_ptr<HeldState> held_;  // the state kept while parked; null when none
};

// Writes a stage's parameters and buffers as a dict {qualified name: tensor} in PyTorch's zip
// format (torch.load(path, weights_only=True) reads it).
void SaveParameters(const Stage& stage, const std::string& path);

}  // namespace mitra::worker
