// The pipeline phase of a simulated step (planner/simulator.h): ranks run their instruction
// lists against one clock, event by event. Internals of the simulator, declared here so that
// they can be tested on their own.
//
//  - Computations advance at their machine's speed for the number of its ranks computing at
//    the moment (processor sharing, re-evaluated at every event), or, with a fixed load, at the
//    speed for that many whatever computes.
//  - A send takes its caller what the profile measured a send call to take
//    (Profile::SendSeconds, 0 when not measured) and otherwise does not block; it is no
//    computation of the model (not `busy`) but shares the cores as one. A receive waits for its
//    message, which Gloo moves once both sides have posted it (rendezvous): from the later of
//    the send and the receive, it takes the link's busy latency plus bytes / bandwidth
//    (Profile::P2pSeconds).
//  - A rank begins at its RankSpec::start and is done at the end of its list.
#pragma once

#include <string>
#include <vector>

#include "planner/profile.h"
#include "planner/step_ranks.h"

namespace mitra::planner::detail {

struct TraceEvent {
  std::string name;  // as PredictedOp::name
  double start = 0, end = 0;
};

// What the pipeline phase of a rank came to.
struct Timeline {
  double done = 0;
  double final_backward_start = 0, final_backward_end = 0;
  double busy = 0;                 // wall time computing
  std::vector<TraceEvent> events;  // computations and waits, with `trace` only
};

// Runs `members` (indices into ranks.specs), which exchange messages only among themselves:
// one Timeline per member, in their order. `fixed_load`: by machine (as RankSpec::machine),
// the number of processes whose speed each of its ranks runs at; nullptr: processor sharing.
std::vector<Timeline> RunPipelines(const RankSet& ranks, const std::vector<int>& members,
                                   const std::vector<int>* fixed_load, const StageCosts& costs,
                                   const Profile& profile, bool trace);

}  // namespace mitra::planner::detail
