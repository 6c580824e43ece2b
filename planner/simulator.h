// Simulator: predicts one training step of a shape from a profile, by replaying the very
// instruction lists the workers execute (mitra/planner/schedule.h) with the profiled costs.
//
// What it models, as the runtime does it (docs/planner.md):
//  - every rank runs its stage's list in order: forwards (with or without the autograd graph),
//    recomputations and backwards cost the sum of the stage's segments at the micro-batch's size,
//    plus loading the samples on the first and last stages; sends do not block, receives wait
//    for the message, which moves once both sides have posted it (Gloo's rendezvous): from the
//    later of the send and the receive, it takes the link's latency (its busy latency, measured
//    while both processes compute, where profiled) plus bytes / bandwidth;
//  - a machine's cores are shared: while k of its processes compute, each runs at the machine's
//    profiled speed for k (processor sharing, re-evaluated at every event);
//  - the data-parallel all-reduce overlaps the last backward: it ends what the profile measured
//    an all-reduce of the stage's gradients to add after a backward that runs alongside it
//    (Profile::AllreduceAfterCompute); without that measurement, at the later of (last
//    backward's end + the last bucket's all-reduce) and (last backward's start + the whole
//    all-reduce), over the stage's replicas; buffers are exchanged after it;
//  - the step's small all-reduce synchronises every rank; each then updates its parameters.
// The step time is rank 0's, from the start of its step to the end of its update, with every
// rank starting where the previous step's update left it.
//
// Replicas that share no machine only meet in the all-reduce, so each group of replicas linked
// by shared machines is simulated on its own, and identical groups once. A group of more than
// kMaxSharedRanks ranks (a shape whose pipelines straddle machines in a long chain) is
// simulated replica by replica with each machine's speed fixed at its number of ranks. On a
// large list of like machines only a few periods of replicas are simulated: the rest repeat
// them exactly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mitra/common/status.h"
#include "mitra/planner/batch_split.h"
#include "planner/profile.h"
#include "mitra/planner/schedule.h"

namespace mitra::planner {

struct Candidate {
  int stages = 1;    // P
  int replicas = 1;  // D
  int64_t chunk_size = 1;
  ScheduleKind schedule = ScheduleKind::k1F1B;
  bool recompute = false;
  // ZeRO-1 (with D > 1): each replica keeps and updates the optimizer state of its share of the
  // stage's segments (i mod D), then broadcasts its share's parameters (docs/runtime.md).
  bool zero = false;
  std::vector<int> partition;     // segments per stage, as --partition takes them
  // Each replica's partition where the pipelines' machines differ (--partition 1,3/3,1);
  // empty: `partition` for every replica.
  std::vector<std::vector<int>> pipelines;
  // Each replica's micro-batches (mitra/planner/batch_split.h); empty: even. Uneven shares give the
  // replicas on faster machines more of the batch, with the same update.
  Shares shares;

  const std::vector<int>& PartitionOf(int replica) const {
    return pipelines.empty() ? partition : pipelines.at(replica);
  }
  std::string PartitionText() const;  // "1,4,4,3", or "1,3/3,1" per pipeline
  std::string ScheduleText() const;   // "1f1b", "gpipe+recompute"
  std::string ToString() const;       // "2 x 1, micro-batch 4, 1f1b, partition 5,5[, shares 5,3]"
};

struct SimulationInput {
  const Profile* profile = nullptr;
  Candidate candidate;
  int64_t global_batch = 0;
  // The machine of each rank (rank r is stage r mod P of replica r div P), as the profile names
  // machines; a machine it does not know is costed as its first.
  std::vector<std::string> rank_machines;
  int64_t bucket_bytes = int64_t{1} << 20;  // data-parallel bucket (the runtime's default)
  bool trace = false;                       // fill Prediction::trace
};

// One predicted instruction (or phase: "reduce", "update") of a rank, in seconds from the step's
// start.
struct PredictedOp {
  int rank = 0;
  std::string name;  // as the runtime's step trace names it: "F3", "B0", "Ra1", "update", ...
  double start = 0, end = 0;
};

struct Prediction {
  double step_s = 0;
  double bubble_fraction = 0;         // the ranks' idle share of the pipeline phase
  std::vector<int64_t> memory_bytes;  // peak per rank: parameters, gradients, optimizer, activations
  int64_t max_memory_bytes = 0;
  // Per replica (0 for one not simulated): how long its pipeline phase took, from its first
  // rank's start to its last rank's end; what the planner weighs the replicas' speeds by.
  std::vector<double> replica_phase_s;
  std::string trace;                  // chrome://tracing / Perfetto JSON of the step, when asked
  std::vector<PredictedOp> ops;       // the same, as data
};

inline constexpr int kMaxSharedRanks = 64;
// Above this many ranks, on machines that are all alike, only representative replicas are
// simulated (planner/replica_groups.h says which).
inline constexpr int kRepresentativesAbove = 256;

// InvalidArgument for an inconsistent input (partition, machines, batch smaller than D
// micro-batches).
Result<Prediction> Simulate(const SimulationInput& input);

}  // namespace mitra::planner
