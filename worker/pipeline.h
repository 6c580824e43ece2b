// PipelineStep: runs one stage's instruction list for one training step.
//
// The executor owns the per-micro-batch state of a step (stashed inputs, outputs, gradients)
// and nothing across steps. Activations received from the previous stage become leaf tensors
// (floating ones require grad); after a micro-batch's backward their gradients go back, one per
// floating activation, in name order (zeros where a tensor got no gradient), so sender and
// receiver always agree on the messages without a header.
#pragma once

#include <functional>
#include <vector>

#include "cutpoint/model.h"
#include "planner/schedule.h"
#include "worker/comm.h"
#include "worker/grad_reducer.h"
#include "worker/stage.h"

namespace mitra::worker {

struct PipelineContext {
  const cutpoint::ModelSpec* spec;
  Stage* stage;
  Comm* comm;
  GradReducer* reducer;   // null without data parallelism
  int prev_rank = -1;     // -1 on the first stage
  int next_rank = -1;     // -1 on the last stage
  double loss_scale = 1;  // 1 / global batch
};

// Micro-batch `i` of this replica's share of the step (first and last stages only).
using MicroBatchFn = std::function<cutpoint::Activations(int micro_batch)>;

// Executes `schedule`; returns the sum of this replica's micro-batch losses (already scaled by
// 1/B) on the last stage, 0 elsewhere. Gradients are left accumulated in the parameters; the
// reducer (if any) has been armed for the final backward and must be finished by the caller.
double RunPipelineStep(const PipelineContext& ctx, const std::vector<planner::Instruction>& schedule,
                       int num_micro_batches, const MicroBatchFn& micro_batch);

}  // namespace mitra::worker
