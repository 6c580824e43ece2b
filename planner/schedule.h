// Pipeline schedules as per-stage instruction lists.
//
// One generator produces every schedule; the worker runtime executes the lists and a simulator
// can replay the very same lists. Instructions of one stage run in order. Receives block; sends
// are asynchronous (they complete by the end of the step), which is what makes every schedule
// below deadlock-free.
//
//   GPipe   all forwards, then all backwards.
//   1F1B    P-s-1 warm-up forwards on stage s, then one forward / one backward alternately,
//           then the remaining backwards: at most P-s micro-batches in flight per stage.
//   Varuna  1F1B order with activation recomputation on every stage but the last, and the
//           recompute of micro-batch i issued *before* waiting for its gradient ("just in
//           time"), so it overlaps with the downstream stage's backward. Only stage inputs are
//           stashed between the forward and the backward.
//
//   ZB-H1   zero-bubble (Qi et al., 2024) at 1F1B's activations: each backward is split into B
//           (the gradients of the stage's inputs, sent upstream at once) and W (the weight
//           gradients, which nothing downstream waits for). The lists come from running the
//           stages in lockstep with F = B = W = one unit: a stage does the oldest B whose gradient
//           has arrived, else its next F while fewer than P-s micro-batches are between F and B
//           (1F1B's bound), else the oldest W; at most P weight-gradient stashes wait at once.
//           The W's fill the waits of the warm-up and the drain: at P = 2, M = 4 a step takes 13
//           units where 1F1B takes 15 (12 of work).
//
// With `recompute`, GPipe, 1F1B and ZB-H1 also discard activations in the forward and recompute
// them, but after the gradient arrives.
#pragma once

#include <string>
#include <vector>

#include "mitra/common/status.h"

namespace mitra::planner {

enum class ScheduleKind { kGPipe, k1F1B, kVaruna, kZbH1 };

enum class Op {
  kRecvActivations,  // from the previous stage
  kForward,          // keep the autograd graph for the backward
  kForwardDiscard,   // no graph; stash only the stage's inputs
  kSendActivations,  // to the next stage
  kRecvGradients,    // from the next stage
  kRecompute,        // forward again from the stashed inputs, keeping the graph
  kBackward,
  kSendGradients,    // to the previous stage
  kBackwardInput,    // B: the backward, weight gradients deferred (zero-bubble schedules)
  kBackwardWeight,   // W: the weight gradients a B deferred
};

struct Instruction {
  Op op;
  int micro_batch;
  bool operator==(const Instruction& o) const { return op == o.op && micro_batch == o.micro_batch; }
};

Result<ScheduleKind> ParseScheduleKind(const std::string& name);  // gpipe | 1f1b | varuna | zb-h1
const char* ScheduleName(ScheduleKind kind);
const char* OpName(Op op);

std::vector<Instruction> BuildSchedule(ScheduleKind kind, int num_stages, int stage,
                                       int num_micro_batches, bool recompute);

// Forward only, without autograd graphs (evaluation): receive, forward, send each micro-batch.
std::vector<Instruction> BuildForwardOnlySchedule(int num_stages, int stage, int num_micro_batches);

// "F0 S0 F1 ..." for logs and tests.
std::string ToString(const std::vector<Instruction>& schedule);

}  // namespace mitra::planner
