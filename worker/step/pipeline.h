// PipelineStep: runs one stage's instruction list for one training step or evaluation pass.
//
// The executor owns the per-micro-batch state of a step (stashed inputs, outputs, gradients)
// and nothing across steps. Activations received from the previous stage become leaf tensors
// (floating ones require grad); after a micro-batch's backward their gradients go back, one per
// floating activation, in name order (zeros where a tensor got no gradient), so sender and
// receiver always agree on the messages without a header.
//
// A micro-batch forwarded without its graph (kForwardDiscard) is recomputed later from its
// stashed inputs with the same random numbers (ForwardKey) and, when the stage has buffers,
// from the buffers it first saw, which are put back afterwards: a recomputation computes what
// the first forward computed and updates no buffer a second time.
//
// With several chunks per rank (interleaved, zb-v) each chunk has its own neighbours and its
// micro-batches their own state; messages are tagged by the pipeline edge they cross, and an
// edge between two chunks of this rank (the V's turn) passes its tensors in memory, detached,
// exactly as a message would deliver them.
#pragma once

#include <functional>
#include <vector>

#include "mitra/cutpoint/model.h"
#include "mitra/planner/schedule.h"
#include "mitra/worker/stage.h"
#include "worker/comm/comm.h"
#include "worker/step/grad_reducer.h"
#include "worker/step/precision.h"
#include "worker/step/step_trace.h"

namespace mitra::worker {

using cutpoint::MetricFn;

// A chunk's place in the pipeline: its virtual stage (planner::ChunkLayout) and the ranks of the
// virtual stages before and after it: -1 where the model begins or ends; this rank's own where
// the neighbour is another of its chunks.
struct ChunkLinks {
  int virtual_stage = 0;
  int prev_rank = -1;
  int next_rank = -1;
};

struct PipelineContext {
  const cutpoint::ModelSpec* spec;
  Stage* stage;
  Comm* comm;
  GradReducer* reducer = nullptr;  // null without data parallelism (or when evaluating)
  int rank = -1;                   // this rank's (tells a neighbouring chunk of its own)
  std::vector<ChunkLinks> chunks{ChunkLinks{}};  // by the stage's chunk
  int num_virtual_stages = 1;
  double loss_scale = 1;           // 1 / global batch
  double grad_scale = 1;           // the loss scaler's scale: multiplies the loss for backward only
  Precision precision = Precision::kFp32;  // forwards run under autocast unless fp32
  c10::DeviceType device_type = c10::DeviceType::CPU;
  int64_t step = 0;                // of ForwardKey: the step, or ForwardKey::kEvalStep
  int64_t first_micro_batch = 0;   // global index of this replica's first micro-batch
  StepTrace* trace = nullptr;      // records every instruction when set
  double* wait_s = nullptr;        // when set, the sends' and receives' seconds are added here
  // When set, asked before every instruction: true gives the step up (PeerError).
  std::function<bool()> abandoned;
};

// Micro-batch `i` of this replica's share of the step (first and last stages only).
using MicroBatchFn = std::function<cutpoint::Activations(int micro_batch)>;

// Executes `schedule`; returns the sum of this replica's micro-batch losses (already scaled by
// 1/B) on the last stage, 0 elsewhere. Gradients are left accumulated in the parameters; the
// reducer (if any) has been armed for the final backward and must be finished by the caller.
double RunPipelineStep(const PipelineContext& ctx, const std::vector<planner::Instruction>& schedule,
                       int num_micro_batches, const MicroBatchFn& micro_batch);

// Executes a forward-only `schedule` (planner::BuildForwardOnlySchedule) without autograd. On
// the last stage returns the sums over this replica's samples of the loss (unscaled) and of
// each metric, in that order, as float64; zeros elsewhere.
std::vector<double> RunEvalPipeline(const PipelineContext& ctx,
                                    const std::vector<planner::Instruction>& schedule,
                                    int num_micro_batches, const MicroBatchFn& micro_batch,
                                    const std::vector<MetricFn>& metrics);

}  // namespace mitra::worker
