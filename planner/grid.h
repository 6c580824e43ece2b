// The job's shape: P pipeline stages x D data-parallel replicas, and where each rank goes.
//
// Ranks follow Varuna's layout: rank r is stage r mod P of replica r div P, so one pipeline's
// ranks are consecutive and land on the same machine when it has room. Ranks fill the machines
// in list order, slot by slot; slots beyond P x D stay idle. (The planner may fill the machines
// in another order, fastest first say: PlannedShape::machine_order; a morph may give a machine's
// ranks its slots in another order: manager/state_placement.h.)
//
// The global batch is cut into micro-batches of the chunk size in the same way in every shape
// (mitra/planner/batch_split.h), and each replica takes whole micro-batches: D is at most the
// number of micro-batches. Everything here is a pure function.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mitra/common/status.h"
#include "mitra/contract/stage_map.h"
#include "mitra/planner/batch_split.h"
#include "mitra/planner/schedule.h"

namespace mitra::planner {

// A machine as the planners see it: its address (as a profile names machines) and slots.
struct MachineSlots {
  std::string address;
  int slots = 1;
};

std::vector<int> SlotsOf(const std::vector<MachineSlots>& machines);

// The machine (index into `slots_per_machine`) of each of `world` ranks: machines filled slot
// by slot in list order.
// Replica `replica`'s partition in a plan's partition text: its counts in "1,3/3,1" (each
// pipeline cut its own way), else the text itself; "" when the text names fewer pipelines.
std::string ReplicaPartition(const std::string& partition, int replica);

std::vector<int> RankMachines(const std::vector<int>& slots_per_machine, int world);

struct GridRequest {
  std::vector<int> slots_per_machine;  // in machine-list order
  int stages = 1;                      // P
  int segments = 0;                    // the program's segment count (P may not exceed it)
  int64_t global_batch = 0;            // B
  int chunk_size = 0;                  // 0: DefaultChunkSize for the shape
  int replicas = 0;                    // D; 0: as many as the slots allow
  // The default chunk will be kept for the rest of the job (a model whose math depends on its
  // micro-batches): it leaves room for the job to grow (DefaultChunkSize).
  bool chunk_kept = false;
};

struct RankPlacement {
  int rank = 0;
  int machine = 0;     // index into the machine list
  int local_rank = 0;  // index among the ranks on that machine
  int stage = 0;
  int replica = 0;
};

struct GridPlan {
  int stages = 0;    // P
  int replicas = 0;  // D
  int64_t global_batch = 0;
  int chunk_size = 0;
  int total_slots = 0;
  int idle_slots = 0;  // total_slots - P * D
  // Why slots are idle beyond the P x D grid's remainder (D limited by the micro-batches, or a
  // planner's choice); "".
  std::string idle_reason;
  contract::StageMap stage_map = contract::StageMap::Default(1, 1);  // the default layout
  std::vector<RankPlacement> ranks;  // indexed by rank
  // What a planner chose besides the shape (planner/planner.h); unset: the program's own.
  std::optional<ScheduleKind> schedule;
  bool recompute = false;
  bool zero = false;  // ZeRO-1 (a planned shape: MITRA_ZERO)
  // Segments per stage, "1,4,4,3"; or per pipeline, "1,3/3,1" (ReplicaPartition).
  std::string partition;
  Shares shares;  // each replica's micro-batches when a planner made them uneven; empty: even
  double predicted_step_s = 0;  // 0: not predicted
  int64_t predicted_memory_bytes = 0;
  // Each rank's compute a step as the planner's profile predicts it (its stage over its
  // replica's share, at its machine's speed); empty when not planned from a profile. The
  // straggler detector judges each rank against it.
  std::vector<double> expected_compute_s;
  // The machines the plan runs ranks on that its profile has no figures of (addresses), each
  // costed as the profile's first until the job's steps measure it (a speed correction).
  std::vector<std::string> unmeasured;

  int world_size() const { return stages * replicas; }
};

// Checks the request and plans the grid: D = floor(slots / P), at most the number of
// micro-batches. InvalidArgument, naming the flag to change, when P exceeds the segments or the
// slots, when B < D, or when the chunk size exceeds B.
Result<GridPlan> PlanGrid(const GridRequest& request);

// The micro-batch size when --chunk-size is not given, for B samples, P stages and D replicas:
// about 4 P micro-batches per replica so that a pipeline's fill and drain bubble stays under
// ~20%; for P = 1 one micro-batch per replica (nothing to fill), unless the chunk is kept for
// the job (`kept`), when 4 per replica leave the job room to grow to 4 times the replicas.
int DefaultChunkSize(int64_t global_batch, int stages, int replicas, bool kept);

}  // namespace mitra::planner
