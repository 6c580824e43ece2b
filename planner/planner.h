// Planner: the fastest shapes of a job on the machines at hand, from a profile.
//
// It enumerates P (every depth up to the segments and slots, not only divisors), D (every
// count up to the slots P leaves, or a spread of counts on large machine lists), the
// micro-batch (the profiled sizes, plus the one that shares the batch evenly, or only the job's
// fixed one), the schedule (GPipe, 1F1B, Varuna, ZB-H1, interleaved and ZB-V where the model has
// a segment for each of their chunks; with recomputation where activations would not fit
// otherwise) and, for each, the partition that balances the stages' (under interleaved and ZB-V,
// the chunks') measured time on the machines they run on. Candidates are simulated (planner/simulator.h) in the order of a lower
// bound of their step time, until no candidate left can enter the best `keep`; those that do
// not fit a machine's memory are dropped, and the rest are ranked by predicted step time, fewer
// busy slots first among equals. On machines that differ, all of this is done for each order in
// which the ranks may fill the machines (MachineOrders): which machines the shape uses, which
// form a pipeline and which runs which stage. Pure and thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mitra/common/status.h"
#include "planner/grid.h"
#include "planner/profile.h"
#include "planner/simulator.h"

namespace mitra::planner {

struct PlanRequest {
  const Profile* profile = nullptr;
  int64_t global_batch = 0;
  std::vector<MachineSlots> machines;  // the usable machines, in list order
  int64_t chunk_size = 0;  // > 0: the job's micro-batch is fixed; only it is tried
  bool chunk_kept = false;  // the chosen micro-batch stays for the job (GridRequest::chunk_kept)
  int stages = 0;          // > 0: only this P
  std::optional<bool> zero;  // ZeRO-1: never, always (D > 1); unset: where a shape needs it
  std::vector<ScheduleKind> schedules = {ScheduleKind::k1F1B,  ScheduleKind::kGPipe,
                                         ScheduleKind::kVaruna, ScheduleKind::kZbH1,
                                         ScheduleKind::kInterleaved, ScheduleKind::kZbV};
  // How many of the best shapes must be exact: shapes whose lower bound (their busiest stage's
  // compute alone) cannot beat the keep-th best found are not simulated. 0: simulate all.
  int keep = 10;
};

struct PlannedShape {
  Candidate candidate;
  int idle_slots = 0;
  Prediction prediction;  // without its trace
  // The order in which its ranks fill the machines, as indices into PlanRequest::machines
  // (MachineOrders); empty: list order.
  std::vector<int> machine_order;
};

struct PlanResult {
  std::vector<PlannedShape> candidates;  // fastest first
  int considered = 0;  // shapes enumerated
  int simulated = 0;
  int too_big = 0;  // dropped because a machine's memory would not hold them
};

// InvalidArgument names what is wrong (no machines, a batch too small for any shape, ...);
// NotFound when no shape fits the machines' memory.
Result<PlanResult> PlanShapes(const PlanRequest& request);

// The contiguous split of segments (costs in model order) into stages whose largest
// cost / speed is the smallest; `stage_speed` has one entry per stage.
std::vector<int> BalancedPartition(const std::vector<double>& segment_cost,
                                   const std::vector<double>& stage_speed);

// The machine of each of `world` ranks: machines filled slot by slot in list order.
std::vector<std::string> PlaceRanks(const std::vector<MachineSlots>& machines, int world);

// Each machine's speed as `profile` has it, relative to the fastest of `machines` (1): the
// fastest one's forward and backward of every segment at the largest profiled micro-batch over
// its own; 0 for a machine without figures. In list order.
std::vector<double> RelativeSpeeds(const Profile& profile,
                                   const std::vector<MachineSlots>& machines);

// The orders in which the planner lets ranks fill the machines, each a permutation of indices
// into `machines`: list order first; where some machine's speed is under 0.95 of the fastest,
// also fastest first (a shape that leaves slots idle leaves the slowest machines', a pipeline
// of like machines becomes a replica that uneven shares weigh) and fastest and slowest
// alternating (each pipeline takes a mix, which one partition balances). An order equal to
// one before it is left out.
std::vector<std::vector<int>> MachineOrders(const Profile& profile,
                                            const std::vector<MachineSlots>& machines);

// `machines` in `order` (MachineOrders); an empty order: as they are.
std::vector<MachineSlots> InOrder(const std::vector<MachineSlots>& machines,
                                  const std::vector<int>& order);

}  // namespace mitra::planner
