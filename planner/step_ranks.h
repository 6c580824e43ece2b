// The ranks of a simulated step (planner/simulator.h): what each one does, fixed before the
// simulation, and what its instructions cost and hold in memory. Internals of the simulator,
// declared here so that they can be tested on their own.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "mitra/planner/batch_split.h"
#include "planner/profile.h"
#include "mitra/planner/schedule.h"
#include "planner/simulator.h"

namespace mitra::planner::detail {

// One chunk of a rank (planner::ChunkLayout; one per rank but under interleaved and zb-v): its
// segments [first_segment, end_segment), whether it begins or ends the model (it loads the
// micro-batch's samples), and the ranks its messages go to (-1: none; the rank's own: the V's
// turn, which moves nothing).
struct ChunkSpec {
  int first_segment = 0, end_segment = 0;
  bool first = false, last = false;
  int prev_rank = -1, next_rank = -1;
  int prev_chunk = 0, next_chunk = 0;  // which of those ranks' chunks
};

// What a rank does in the step, fixed before the simulation.
struct RankSpec {
  int rank = 0, stage = 0, replica = 0;
  int machine = 0;  // index into RankSet::addresses
  const MachineProfile* profile = nullptr;
  std::vector<Instruction> list;
  std::vector<int64_t> sizes;  // of its micro-batches
  std::vector<ChunkSpec> chunks;
  std::vector<int> segments;  // every chunk's, in chunk order
  int final_backward = -1;  // index in `list`
  double start = 0;         // when its step begins (where its previous update ended)
  double update_s = 0;      // its update, at its machine's full load
};

// The ranks that are simulated, and the machines they run on.
struct RankSet {
  std::vector<RankSpec> specs;
  std::vector<int> index;              // rank -> its spec; -1: not simulated
  std::vector<std::string> addresses;  // the distinct machines, in the order of first use
  // The ranks on each machine, counted over every rank of the shape (a representative's machine
  // holds as many as its period's).
  std::vector<int> machine_load;
};

// Whether the rank of `spec` keeps (and updates) the optimizer state of segments[k] under ZeRO-1
// with `replicas` replicas: segment k of its stage belongs to replica k mod D.
inline bool KeepsOptimizerState(const RankSpec& spec, int replicas, int k) {
  return replicas <= 1 || ReplicaOwningSegment(k, 0, replicas) == spec.replica;
}

// The specs of every rank of `replicas` (ascending): their instruction lists, micro-batches and
// machines' loads, and each rank's update and start: each update runs while every rank of its
// machine updates too, and each step begins where the previous step's update ended (the step's
// all-reduce released every rank at once). `in` has been checked (Simulate).
RankSet BuildRanks(const SimulationInput& in, const std::vector<int>& replicas);

// What a rank's instructions cost: the segments of the instruction's chunk at a micro-batch
// size, on its machine, memoised (the same few sizes recur). Not thread-safe: lookups fill the
// memo. A zero-bubble schedule's W costs the segments' weight_s, its B the rest of the backward.
class StageCosts {
 public:
  explicit StageCosts(const Profile& profile) : profile_(profile) {}

  // Seconds of computation at speed 1 (0 for messages). Forwards of the model's first or last
  // chunk include loading the micro-batch's samples; a recomputation does not (the inputs are
  // stashed).
  double Work(const RankSpec& r, const Instruction& ins, int64_t size) const;
  // Of chunk `chunk`: received from the virtual stage before it, sent to the one after it, kept
  // by a forward for the backward.
  int64_t InputBytes(const RankSpec& r, int chunk, int64_t size) const;
  int64_t OutputBytes(const RankSpec& r, int chunk, int64_t size) const;
  int64_t GraphBytes(const RankSpec& r, int chunk, int64_t size) const;

 private:
  struct Cost {
    double forward = 0, nograd = 0, backward = 0, weight = 0, samples = 0;
    int64_t input_bytes = 0, output_bytes = 0, graph_bytes = 0;
  };
  const Cost& Of(const RankSpec& r, int chunk, int64_t size) const;

  const Profile& profile_;
  mutable std::map<std::tuple<const MachineProfile*, int, int, bool, int64_t>, Cost> memo_;
};

// The most activation memory the rank's list holds at once, replayed from the list: received
// inputs until their gradients are sent back, autograd graphs from a forward or recomputation
// until the backward (a split one's W), and the receives the runtime posts ahead
// (docs/runtime.md): a gradient's from its activations' send to its backward, the next two
// activation messages from other ranks.
int64_t PeakActivationBytes(const RankSpec& spec, const StageCosts& costs);

}  // namespace mitra::planner::detail
