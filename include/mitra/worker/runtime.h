// Runtime: one worker's part of a pipeline x data-parallel training job.
//
// Create() connects to the job (rendezvous, process groups), builds only this rank's stage,
// makes tied weights identical and sets up the optimizer. Step(k) then trains global step k:
// it runs the schedule over this replica's micro-batches, reduces gradients across replicas
// (bucketed, overlapped with backward), sums tied-weight gradients across stages, clips by the
// global norm over all stages, makes the replicas' buffers equal again, and takes the optimizer
// step with the scheduled learning rate. Evaluate() runs a forward-only pass over a dataset.
//
// Every shape P x D computes the same update: the loss is normalised by the global batch, the
// sample order depends only on (seed, step), micro-batches are cut from the global batch the
// same way in every shape (mitra/planner/batch_split.h) and random numbers are drawn per
// micro-batch and segment. For users who own their loop, Step() and Evaluate() are the whole API;
// the Trainer (trainer.h) wraps them in a loop with logging, checkpoints and stop handling.
// Not thread-safe. Communication failures throw PeerError (worker/comm/comm.h, a
// std::runtime_error).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mitra/contract/precision.h"
#include "mitra/cutpoint/model.h"
#include "mitra/cutpoint/partition.h"
#include "mitra/planner/batch_split.h"
#include "mitra/planner/schedule.h"
#include "mitra/worker/backend.h"
#include "mitra/worker/data.h"
#include "mitra/worker/loss_scaler.h"
#include "mitra/worker/lr_schedule.h"
#include "mitra/worker/optimizer.h"
#include "mitra/worker/placement.h"

namespace mitra::worker {

class BufferSync;
class Comm;
struct HeldState;
class LossScaler;
class GradReducer;
class PipelinePartitions;
class Stage;
class ArrivingState;
class TiedWeights;
struct PipelineContext;
using cutpoint::MetricFn;

// The settings of one worker, with their defaults: the only place they are written. A program
// fills them from its command line (examples/common/trainer_flags.h) or Python's keywords
// (python/src/trainer_options.cc); the named ones are parsed there, once, by ParseScheduleKind,
// ParsePartitionMethod, ParseBackend, ParsePrecision, ParseDeviceKind and ParseSamplerKind, whose
// *Name counterparts spell them back. The placement wins where the manager set something
// (MITRA_SCHEDULE, MITRA_RECOMPUTE, MITRA_PARTITION, MITRA_PRECISION, MITRA_DEVICE,
// MITRA_GLOBAL_BATCH, MITRA_CHUNK_SIZE): Runtime::options() holds the settings in effect.
struct RuntimeOptions {
  planner::ScheduleKind schedule = planner::ScheduleKind::k1F1B;
  bool recompute = false;               // activation recomputation for gpipe and 1f1b
  cutpoint::PartitionMethod partition;  // uniform
  Backend backend = Backend::kGloo;     // nccl: a CUDA build (scripts/gpu-build)
  // How and where the stage computes (worker/step/precision.h). fp32 on the CPU is the default and
  // costs nothing extra; fp16 needs cuda, which is the GPU of the local rank.
  contract::Precision precision = contract::Precision::kFp32;
  contract::DeviceKind device = contract::DeviceKind::kCpu;
  bool share_gpus = false;          // cuda: local rank r computes on GPU r mod GPUs
  LossScalerOptions loss_scaler;    // dynamic loss scaling: always on for fp16
  uint64_t seed = 1234;             // model initialisation, sample order, random numbers
  int64_t global_batch = 32;        // overridden by the placement when the manager sets it
  int chunk_size = 8;               // micro-batch size; likewise
  OptimizerOptions optimizer;       // AdamW unless said otherwise
  double clip_norm = 1.0;           // global gradient norm; <= 0 disables clipping
  LrSchedule lr;
  SamplerKind sampler = SamplerKind::kShuffled;  // data.h
  SamplerFactory custom_sampler;  // the program's own sampler, used instead when set
  int64_t bucket_elements = 1 << 18;  // data-parallel bucket size (elements)
  // 1: ZeRO stage 1. With several replicas, each replica of a stage keeps and updates the
  // optimizer state of its share of the stage's segments only (segment i of the stage: replica
  // i mod D, the one that checkpoints it), then sends the updated parameters to the others
  // (docs/runtime.md#zero-1). 0: every replica keeps all of it.
  int zero = 0;
  // When set, the runtime writes a chrome trace of one step (the third this process trains,
  // after warm-up) to this file (worker/step/step_trace.h).
  std::string trace_path;
  // Debugging aid: when set, the first stage of every replica appends a line
  // "<step> <replica> <dataset index>..." per step to <sample_trace>.rank-<R>.
  std::string sample_trace;
};

// What a rank wishes at the end of a step: to go on, to stop, or to stop and hold its state in
// memory for the next generation (a morph that needs no checkpoint: worker/step/held_state.h). Or,
// at any time, to give up the step in flight because a peer failed (kAbandon, the manager's
// word): the step throws PeerError before its next instruction, as it would at its next message
// to the failed peer, and the rank keeps the state of the steps it completed.
enum class StopWish { kNone, kStop, kHold, kAbandon };

struct StepResult {
  double loss = 0;       // mean loss over the global batch
  double grad_norm = 0;  // before clipping
  double lr = 0;
  bool stop = false;     // some rank asked to stop: every rank sees the same value
  // Every rank that asked to stop asked to stop and hold (StopWish::kHold); likewise the same on
  // every rank.
  bool hold = false;
  // With a loss scaler: the scale the step's backward used (else 0), and whether the step was
  // skipped because its gradients overflowed (every rank skips the same steps).
  double loss_scale = 0;
  bool skipped = false;
  // This rank's share of the step: waiting for peers (pipeline receives and sends, the
  // data-parallel and tied-weight reductions, the step's all-reduce) and everything else.
  double wait_s = 0;
  double compute_s = 0;
};

// What an evaluation pass found; every rank gets the same.
struct EvalResult {
  int64_t samples = 0;
  double loss = 0;  // mean over the samples of the model's loss
  std::vector<std::pair<std::string, double>> metrics;  // each metric's mean over the samples
};

class Runtime {
 public:
  // Bad configuration (partition, schedule, batch smaller than the replicas) is a Status;
  // a peer that does not join in time throws PeerError.
  // `held` (may be null): the state this process kept when it parked; the segments of this
  // rank's stage it holds as they were after the placement's resume step are taken from it,
  // with their optimizer state, instead of being built.
  static Result<std::unique_ptr<Runtime>> Create(const cutpoint::ModelSpec& spec,
                                                 std::shared_ptr<const Dataset> dataset,
                                                 const Placement& placement,
                                                 const RuntimeOptions& options,
                                                 HeldState* held = nullptr);
  ~Runtime();

  // Trains global step `step` (0-based). `stop_requested` is this rank's wish to stop after it;
  // the result's `stop` combines the wishes of all ranks.
  StepResult Step(int64_t step, bool stop_requested = false) {
    const StopWish wish = stop_requested ? StopWish::kStop : StopWish::kNone;
    return Step(step, [wish] { return wish; });
  }
  // The same, with the wish asked for as late as possible: just before the step's all-reduce,
  // so that a stop signal that arrives while the step computes ends the job after this step,
  // not after the next one. Called once per step, on the calling thread. (Pass a
  // std::function: a plain lambda would also convert to bool.)
  // A PeerError leaves the parameters and optimizer state as they were before the step when
  // this rank had not passed the step's all-reduce, and as after it when it had:
  // completed_steps() says which. So does it the buffers on a rank whose placement can park.
  StepResult Step(int64_t step, const std::function<StopWish()>& stop_requested);

  // The steps the parameters and optimizer state have taken: the last Step() that returned or
  // passed its all-reduce, plus one (the resume step before any).
  int64_t completed_steps() const { return completed_steps_; }
  // The resume is complete: every segment holds its state of the resume step (a restore, a
  // transfer from peers). Until then Release() gives only the segments taken from `held`. A
  // runtime created at step 0 starts complete.
  void MarkRestored() { restored_ = true; }
  // Ends the runtime's use of its state and hands it over, as it is after completed_steps()
  // steps: the stage's segments, their optimizer state and the trainer state. The runtime
  // must not train after this.
  // Under ZeRO-1 with several replicas no rank keeps a segment's whole optimizer state, and
  // under interleaved and zb-v a rank's segments are not one range: it hands over no segment
  // (a morph or a recovery then resumes from the checkpoint).
  HeldState Release();

  // Whether Release() hands over the stage's whole state: not under ZeRO-1 with replicas, nor
  // with several chunks per rank.
  bool HoldsWholeState() const { return !sharded_ && layout_.chunks == 1; }
  // Under ZeRO-1 with several replicas: each keeps the optimizer state of its share.
  bool ShardsOptimizerState() const { return sharded_; }
  // The replica that owns `segment` (one of the stage's): planner::ReplicaOwningSegment of its
  // place in the stage, or of the segment itself where each pipeline has its own partition.
  int ReplicaOwning(int segment) const;
  // Whether this rank keeps the optimizer state of `segment` (one of its stage's): always,
  // except under ZeRO-1 with several replicas, where it keeps its share's only.
  bool KeepsOptimizerStateOf(int segment) const;
  // The bytes of the optimizer state this rank holds (its tensors, as they are now).
  int64_t OptimizerStateBytes() const;

  // Forward-only pass in evaluation mode over samples [0, n) of `dataset` (n = its size, or
  // `max_samples` when that is smaller and > 0), in micro-batches of `chunk_size` (0: the
  // training chunk) shared among the replicas: the mean loss and the mean of each metric (a sum
  // over a micro-batch's samples, like the loss). A collective: every rank calls it with the
  // same arguments. The result is the same in every shape; training mode is restored after.
  EvalResult Evaluate(const Dataset& dataset,
                      const std::vector<std::pair<std::string, MetricFn>>& metrics,
                      int64_t max_samples = 0, int64_t chunk_size = 0);

  const Placement& placement() const { return placement_; }
  const cutpoint::ModelSpec& spec() const { return spec_; }
  const Stage& stage() const { return *stage_; }  // mitra/worker/stage.h
  const cutpoint::Partition& partition() const { return partition_; }  // this replica's
  const PipelinePartitions& pipelines() const { return *pipelines_; }  // every replica's
  const RuntimeOptions& options() const { return options_; }
  int num_micro_batches() const { return static_cast<int>(share_.micro_batches); }
  // The instructions this rank runs in every step (mitra/planner/schedule.h).
  const std::vector<planner::Instruction>& schedule() const { return schedule_; }
  // Where the job's virtual stages live: one chunk per rank, or several (interleaved, zb-v),
  // each one of the partition's ranges.
  const planner::ChunkLayout& layout() const { return layout_; }
  Optimizer& optimizer() { return *optimizer_; }
  const Optimizer& optimizer() const { return *optimizer_; }
  Comm& comm() { return *comm_; }
  // The dynamic loss scaler; null unless loss scaling is on (fp16, or asked for).
  LossScaler* loss_scaler() { return scaler_.get(); }
  const LossScaler* loss_scaler() const { return scaler_.get(); }
  // The effective training settings in one line: optimizer, learning-rate schedule, clipping,
  // batch and micro-batch, schedule, sampler.
  std::string DescribeSettings() const;

  // Runs `hook` once, on the training thread, just before the next optimizer step changes the
  // parameters and optimizer state (or never, if no step follows). A checkpoint that is still
  // copying them waits there, so the copy overlaps the next step's forward and backward.
  void BeforeNextUpdate(std::function<void()> hook) { before_update_ = std::move(hook); }

  // State from peers still on its way after a resume (worker/state/state_exchange.h): the next step
  // waits for it before its all-reduce. Until then the state this runtime would hold is not
  // whole (Release()).
  // `exchange_s`: how long this rank's exchange took until it could train. A collective's
  // part: every rank of the generation calls it, or none.
  void ExpectStateFromPeers(std::unique_ptr<ArrivingState> in_flight, double exchange_s);
  // Waits for all of it, gives the optimizer its state and waits for this rank's sends (at once
  // when nothing is on its way). Throws PeerError when a peer failed.
  void AwaitStateFromPeers();
  // The last resume from peers, timed, the slowest rank's of each once the first step after it
  // is done (that step's all-reduce gathers them: no collective of their own, which would wait
  // for the slowest rank's update): the exchange until the rank could train, its transfers from
  // their start to the last byte it received (0: none), and how long its first step waited
  // for them.
  struct ResumeTimes {
    double exchange_s = 0, arrival_s = 0, wait_s = 0;
  };
  const ResumeTimes& resume_times() const { return resume_times_; }

 private:
  Runtime(const cutpoint::ModelSpec& spec, std::shared_ptr<const Dataset> dataset,
          const Placement& placement, const RuntimeOptions& options);

  // The first step after a resume from peers carries every rank's ResumeTimes in its
  // all-reduce (a sum): this rank's slots of it, and the slowest of each taken from the sum.
  torch::Tensor ResumeTimeSlots() const;
  void TakeSlowestResumeTimes(const torch::Tensor& summed_slots);

  // Create's steps, in order, each on what the ones before set up: the loss scaler (fp16, or
  // asked for); the partition, this replica's share of the batch, the schedule and the sampler,
  // after checking the batch; the stage (from `held` what it holds), on the device, with its
  // tied weights; the optimizer over the parameters whose state this rank keeps; the groups
  // (blocks until every rank joined; throws PeerError), the reducer and the buffers' sync.
  Status SetUpLossScaling();
  Status PlanSteps();
  // PlanSteps' first step: the layout of the schedule's chunks (interleaved's v from the counts
  // of an explicit partition), refusing a partition or a model that does not give each chunk
  // a range.
  Status PlanChunks(const cutpoint::PartitionMethod& own);
  // PlanSteps' partition of every pipeline (one for all, or each replica's own), refusing what
  // a partition per pipeline cannot do yet (ZeRO-1).
  Status PartitionPipelines();

  Status BuildStage(HeldState* held);
  Status SetUpOptimizer(HeldState* held);
  void Connect();

  // The stage's parameters' gradients (those defined), for the _foreach_ operators; without
  // the secondary copies of tied weights when `tied_copies` is false (each counts once).
  std::vector<torch::Tensor> Gradients(bool tied_copies = true) const;
  // Step() without the buffers' restore on a PeerError.
  StepResult TrainStep(int64_t step, const std::function<StopWish()>& stop_requested);
  // After the step's all-reduce (`totals`: squared norm, loss, stop and hold wishes): the
  // result, the loss scale's and clipping's factor on the gradients, the optimizer step.
  StepResult Update(int64_t step, const torch::Tensor& totals);
  // ZeRO-1: each replica's share of the updated parameters, from it to the stage's other
  // replicas (one broadcast per replica, of its share's parameters packed together).
  void ShareUpdatedParameters();
  // Gives the optimizer the state `held` keeps of the segments the stage took from it.
  Status AdoptOptimizerState(HeldState& held);
  cutpoint::Activations MicroBatch(int64_t step, int micro_batch);
  std::vector<int64_t> Indices(int64_t step, int64_t offset, int64_t count);
  // Tells the dataset of this replica's samples of steps [step, step + PrefetchSteps()] not yet
  // told (Dataset::Prefetch).
  void PrefetchFrom(int64_t step);
  void TraceSamples(int64_t step);
  PipelineContext Context(int64_t step, int64_t first_micro_batch);
  // Moves a batch to the stage's device (nothing to do on the CPU).
  void ToDevice(cutpoint::Activations& batch) const;

  const cutpoint::ModelSpec& spec_;
  std::shared_ptr<const Dataset> dataset_;
  Placement placement_;
  RuntimeOptions options_;
  cutpoint::Partition partition_;  // this replica's, of the layout's virtual stages
  std::unique_ptr<PipelinePartitions> pipelines_;  // every replica's
  planner::ChunkLayout layout_;
  std::vector<planner::Instruction> schedule_;
  planner::BatchShare share_;
  int64_t prefetched_through_ = -1;  // the last step PrefetchFrom told the dataset of
  std::unique_ptr<Sampler> sampler_;
  // Destroyed after comm_: its messages' tensors outlive the process groups that send them.
  std::unique_ptr<ArrivingState> in_flight_;
  ResumeTimes resume_times_;  // this rank's until the first step's all-reduce, then the slowest
  std::unique_ptr<Comm> comm_;
  std::unique_ptr<Stage> stage_;
  std::unique_ptr<GradReducer> reducer_;
  std::unique_ptr<TiedWeights> tied_;
  std::vector<std::unique_ptr<BufferSync>> buffer_syncs_;  // one per group with buffers
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<LossScaler> scaler_;   // see loss_scaler()
  c10::Device device_{c10::DeviceType::CPU};
  std::function<void()> before_update_;  // see BeforeNextUpdate
  int64_t steps_run_ = 0;                // by this process
  int64_t completed_steps_ = 0;          // see completed_steps()
  bool restored_ = false;                // see MarkRestored()
  bool sharded_ = false;  // ZeRO-1 with several replicas: see KeepsOptimizerStateOf()
  std::vector<torch::Tensor> step_buffers_;  // the buffers as the step in flight found them
};

}  // namespace mitra::worker
