// Runtime: one worker's part of a pipeline x data-parallel training job.
//
// Create() connects to the job (rendezvous, process groups), builds only this rank's stage,
// makes tied weights identical and sets up the optimizer. Step(k) then trains global step k:
// it runs the schedule over this replica's micro-batches, reduces gradients across replicas
// (bucketed, overlapped with backward), sums tied-weight gradients across stages, clips by the
// global norm over all stages, and takes the optimizer step with the scheduled learning rate.
//
// Every shape P x D computes the same update: the loss is normalised by the global batch and
// the sample order depends only on (seed, step). For users who own their loop, Step() is the
// whole API; the Trainer (trainer.h) wraps it in a loop with logging and stop handling.
// Not thread-safe. Communication failures throw PeerError.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <torch/optim/adamw.h>

#include "cutpoint/model.h"
#include "cutpoint/partition.h"
#include "planner/schedule.h"
#include "worker/comm.h"
#include "worker/data.h"
#include "worker/grad_reducer.h"
#include "worker/lr_schedule.h"
#include "worker/placement.h"
#include "worker/stage.h"
#include "worker/tied_weights.h"

namespace mitra::worker {

struct RuntimeOptions {
  std::string schedule = "1f1b";    // gpipe | 1f1b | varuna
  bool recompute = false;           // activation recomputation for gpipe and 1f1b
  std::string partition = "uniform";  // uniform | params | 1,4,4,3
  std::string backend = "gloo";
  uint64_t seed = 1234;             // model initialisation and sample order
  int64_t global_batch = 32;        // overridden by the placement when the manager sets it
  int chunk_size = 8;               // micro-batch size; likewise
  double weight_decay = 0.01;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double clip_norm = 1.0;           // global gradient norm; <= 0 disables clipping
  LrSchedule lr;
  int64_t bucket_elements = 1 << 18;  // data-parallel bucket size (elements)
  // Debugging aid: when set, the first stage of every replica appends a line
  // "<step> <replica> <dataset index>..." per step to <sample_trace>.rank-<R>.
  std::string sample_trace;
};

struct StepResult {
  double loss = 0;       // mean loss over the global batch
  double grad_norm = 0;  // before clipping
  double lr = 0;
  bool stop = false;     // some rank asked to stop: every rank sees the same value
};

class Runtime {
 public:
  // Bad configuration (partition, schedule, batch smaller than the replicas) is a Status;
  // a peer that does not join in time throws PeerError.
  static Result<std::unique_ptr<Runtime>> Create(const cutpoint::ModelSpec& spec,
                                                 std::shared_ptr<const Dataset> dataset,
                                                 const Placement& placement,
                                                 const RuntimeOptions& options);

  // Trains global step `step` (0-based). `stop_requested` is this rank's wish to stop after it;
  // the result's `stop` combines the wishes of all ranks.
  StepResult Step(int64_t step, bool stop_requested = false) {
    return Step(step, [stop_requested] { return stop_requested; });
  }
  // The same, with the wish asked for as late as possible: just before the step's all-reduce,
  // so that a stop signal that arrives while the step computes ends the job after this step,
  // not after the next one. Called once per step, on the calling thread. (Pass a
  // std::function: a plain lambda would also convert to bool.)
  StepResult Step(int64_t step, const std::function<bool()>& stop_requested);

  const Placement& placement() const { return placement_; }
  const Stage& stage() const { return *stage_; }
  const cutpoint::Partition& partition() const { return partition_; }
  const RuntimeOptions& options() const { return options_; }
  int num_micro_batches() const { return num_micro_batches_; }
  Comm& comm() { return *comm_; }
  torch::optim::AdamW& optimizer() { return *optimizer_; }

  // Runs `hook` once, on the training thread, just before the next optimizer step changes the
  // parameters and optimizer state (or never, if no step follows). A checkpoint that is still
  // copying them waits there, so the copy overlaps the next step's forward and backward.
  void BeforeNextUpdate(std::function<void()> hook) { before_update_ = std::move(hook); }

 private:
  Runtime(const cutpoint::ModelSpec& spec, std::shared_ptr<const Dataset> dataset,
          const Placement& placement, const RuntimeOptions& options);

  cutpoint::Activations MicroBatch(int64_t step, int micro_batch);
  void TraceSamples(int64_t step);

  const cutpoint::ModelSpec& spec_;
  std::shared_ptr<const Dataset> dataset_;
  Placement placement_;
  RuntimeOptions options_;
  cutpoint::Partition partition_;
  std::vector<planner::Instruction> schedule_;
  ReplicaShare share_{0, 0};
  int num_micro_batches_ = 0;
  std::optional<Sampler> sampler_;
  std::unique_ptr<Comm> comm_;
  std::unique_ptr<Stage> stage_;
  std::unique_ptr<GradReducer> reducer_;
  std::unique_ptr<TiedWeights> tied_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  std::function<void()> before_update_;  // see BeforeNextUpdate
};

}  // namespace mitra::worker
