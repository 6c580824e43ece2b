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
//           gradients, which nothing downstream waits for). Stage s runs 1F1B's order with B
//           for the backward, and each W s micro-batches behind its B (the rest after the last
//           B): at most P-s micro-batches between F and B, and P between F and W, what
//           1F1B holds on its first stage, on every stage. The W's the later stages keep back
//           fill the drain: at P = 2, M = 4 a step takes 13 units where 1F1B takes 15 (12 of
//           work, F = B = W = one unit); the bubble is (P-1)(F+B-W).
//
// The next two give each rank v chunks (interleaved: 2 unless the partition gives 3P, 4P, ...
// ranges; zb-v: 2): the model is partitioned into P·v virtual stages (the partition's ranges),
// and the rank at pipeline position s runs the v that ChunkLayout names.
// An instruction's `chunk` says which; a chunk's messages go to the rank of the neighbouring
// virtual stage, or stay on the rank when that is the rank itself (the V's turn).
//
//   Interleaved  Megatron-LM's interleaved 1F1B (Narayanan et al., 2021): virtual stage j on
//           position j mod P; the k-th forward of a rank is chunk (k div P) mod v of micro-batch
//           (k div Pv)·P + k mod P, its k-th backward the same with the chunks in reverse, after
//           (P-s-1)·2 + (v-1)·P warm-up forwards. The bubble shrinks v-fold: (P-1)/v of a
//           stage's F + B, against 1F1B's P-1. Needs M a multiple of P (InterleavedFits) and
//           v >= 2.
//   ZB-V    zero-bubble in a V (Qi et al., 2024): position s holds virtual stages s and 2P-1-s,
//           so the first and the last chunk share rank 0 and the turn at the bottom stays on
//           rank P-1. Lists from running the positions in lockstep over the virtual stages (F = B =
//           W = one unit of a chunk): the oldest ready B, else a forward of the deepest ready chunk
//           while fewer than 2P chunk forwards await their B (P stages' activations, 1F1B's
//           first stage), else the oldest W; at most 2P weight stashes. At P = 2, M = 4 a step
//           takes 25 units of 24 of work.
//
// With `recompute`, GPipe, 1F1B, ZB-H1, interleaved and ZB-V also discard activations in the
// forward (but on the model's last virtual stage) and recompute them after the gradient arrives.
#pragma once

#include <string>
#include <vector>

#include "mitra/common/status.h"

namespace mitra::planner {

enum class ScheduleKind { kGPipe, k1F1B, kVaruna, kZbH1, kInterleaved, kZbV };

// Where a schedule's virtual stages live: `chunks` per rank, P·chunks in all, in the order of
// the model. One chunk per rank (every schedule but interleaved and ZB-V) is the plain pipeline.
struct ChunkLayout {
  int stages = 1;  // P
  int chunks = 1;  // v
  bool v_shape = false;

  int num_virtual_stages() const { return stages * chunks; }
  // The virtual stage of chunk `chunk` on pipeline position `stage`.
  int VirtualStage(int stage, int chunk) const {
    const bool back = v_shape && chunk % 2 == 1;
    return chunk * stages + (back ? stages - 1 - stage : stage);
  }
  // The position and the chunk that run virtual stage `virtual_stage`.
  int StageOf(int virtual_stage) const {
    const int c = virtual_stage / stages, k = virtual_stage % stages;
    return v_shape && c % 2 == 1 ? stages - 1 - k : k;
  }
  int ChunkOf(int virtual_stage) const { return virtual_stage / stages; }
};

// `ranges`: how many ranges the partition cuts (0: not given, the schedule's default). Under
// interleaved, ranges / P chunks per rank (2 by default; callers check InterleavedRanges); under
// zb-v 2; else 1.
ChunkLayout LayoutOf(ScheduleKind kind, int num_stages, int ranges = 0);
// Whether interleaved can cut P stages into `ranges` ranges: 2P, 3P, ...
bool InterleavedRanges(int num_stages, int ranges);

// Whether the interleaved schedule can run M micro-batches per replica over P stages (M a
// multiple of P); the other schedules run any M >= 1.
bool InterleavedFits(int num_stages, int num_micro_batches);

// How many activation messages from other ranks a rank's runtime posts its receives for ahead
// of the instructions that take them (docs/runtime.md, "Messages between stages"); the
// simulator counts their memory.
constexpr int kActivationReceivesAhead = 2;

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
  Instruction(Op op, int micro_batch, int chunk = 0) : op(op), micro_batch(micro_batch), chunk(chunk) {}

  Op op;
  int micro_batch;
  int chunk;  // of the rank's chunks (ChunkLayout); 0 with one chunk per rank
  bool operator==(const Instruction& o) const {
    return op == o.op && micro_batch == o.micro_batch && chunk == o.chunk;
  }
};

// gpipe | 1f1b | varuna | zb-h1 | interleaved | zb-v
Result<ScheduleKind> ParseScheduleKind(const std::string& name);
const char* ScheduleName(ScheduleKind kind);
const char* OpName(Op op);

// The list of position `stage`; interleaved gives none where !InterleavedFits (callers check).
std::vector<Instruction> BuildSchedule(ScheduleKind kind, int num_stages, int stage,
                                       int num_micro_batches, bool recompute);
// The same with the chunks of `layout` (LayoutOf(kind, P, ranges)): interleaved's v.
std::vector<Instruction> BuildSchedule(ScheduleKind kind, const ChunkLayout& layout, int stage,
                                       int num_micro_batches, bool recompute);

// Forward only, without autograd graphs (evaluation): receive, forward, send each micro-batch.
std::vector<Instruction> BuildForwardOnlySchedule(int num_stages, int stage, int num_micro_batches);
// The same over the chunks of `layout`: every micro-batch through chunk 0, then chunk 1, ...
std::vector<Instruction> BuildForwardOnlySchedule(const ChunkLayout& layout, int stage,
                                                  int num_micro_batches);

// "F0 Sa0 F1 ..." for logs and tests, each as InstructionName.
std::string ToString(const std::vector<Instruction>& schedule);
// "F0", "Bi3": the op and the micro-batch; a chunk but the first adds ".c": "F0.1" is chunk 1's
// F0. The runtime's step trace and the simulator name instructions so.
std::string InstructionName(const Instruction& ins);

}  // namespace mitra::planner
