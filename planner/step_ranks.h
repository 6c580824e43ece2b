// The ranks of a simulated step (planner/simulator.h): what each one does, fixed before the
// simulation, and what its instructions cost and hold in memory. Internals of the simulator,
// declared here so that they can be tested on their own.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "planner/batch_split.h"
#include "planner/profile.h"
#include "planner/schedule.h"
#include "planner/simulator.h"

namespace mitra::planner::detail {

// What a rank does in the step, fixed before the simulation.
struct RankSpec {
  int rank = 0, stage = 0, replica = 0;
  int machine = 0;  // index into RankSet::addresses
  const MachineProfile* profile = nullptr;
  std::vector<Instruction> list;
  std::vector<int64_t> sizes;  // of its micro-batches
  int first_segment = 0, end_segment = 0;
  bool first = false, last = false;
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

// Whether the rank of `spec` keeps (and updates) segment `segment`'s optimizer state under
// ZeRO-1 with `replicas` replicas: segment i of its stage belongs to replica i mod D.
inline bool KeepsOptimizerState(const RankSpec& spec, int replicas, int segment) {
  return replicas <= 1 ||
         ReplicaOwningSegment(segment, spec.first_segment, replicas) == spec.replica;
}

// The specs of every rank of `replicas` (ascending): their instruction lists, micro-batches and
// machines' loads, and each rank's update and start: each update runs while every rank of its
// machine updates too, and each step begins where the previous step's update ended (the step's
// all-reduce released every rank at once). `in` has been checked (Simulate).
RankSet BuildRanks(const SimulationInput& in, const std::vector<int>& replicas);

// What a rank's instructions cost: its stage's segments at a micro-batch size, on its machine,
// memoised (the same few sizes recur). Not thread-safe: lookups fill the memo. A zero-bubble
// schedule's W costs the segments' weight_s, its B the rest of the backward.
class StageCosts {
 public:
  explicit StageCosts(const Profile& profile) : profile_(profile) {}

  // Seconds of computation at speed 1 (0 for messages). Forwards on a first or last stage
  // include loading the micro-batch's samples; a recomputation does not (the inputs are stashed).
  double Work(const RankSpec& r, Op op, int64_t size) const;
  int64_t InputBytes(const RankSpec& r, int64_t size) const;   // received from the previous stage
  int64_t OutputBytes(const RankSpec& r, int64_t size) const;  // sent to the next stage
  int64_t GraphBytes(const RankSpec& r, int64_t size) const;   // kept by a forward for the backward

 private:
  struct Cost {
    double forward = 0, nograd = 0, backward = 0, weight = 0;
    int64_t input_bytes = 0, output_bytes = 0, graph_bytes = 0;
  };
  const Cost& Of(const RankSpec& r, int64_t size) const;

  const Profile& profile_;
  mutable std::map<std::tuple<const MachineProfile*, int, int, int64_t>, Cost> memo_;
};

// The most activation memory the rank's list holds at once, replayed from the list: received
// inputs until their gradients are sent back, autograd graphs from a forward or recomputation
// until the backward (a split one's W).
int64_t PeakActivationBytes(const RankSpec& spec, const StageCosts& costs);

}  // namespace mitra::planner::detail
