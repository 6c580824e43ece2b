// The shapes the planner (planner/planner.h) considers, each with a lower bound of its step
// time. Internals of the planner, declared here so that they can be tested on their own.
#pragma once

#include <cstdint>
#include <set>
#include <vector>

#include "planner/planner.h"
#include "planner/simulator.h"

namespace mitra::planner::detail {

struct ShapeOption {
  Candidate candidate;
  // No step of the shape is faster: its busiest stage's compute (forwards, recomputations and
  // backwards of its micro-batches), at the fastest any machine runs each segment and the most
  // a process's speed can be, with no bubble and no communication.
  double bound = 0;
};

// Every shape of a checked `request` on `slots` slots, by ascending bound (enumeration order
// among equals): each depth (only request.stages when given), ReplicaCounts, MicroBatchSizes
// with D <= the micro-batches, each schedule (1F1B alone for P = 1) with and without
// recomputation (not for P = 1 nor Varuna, which recomputes anyway), and the partition that
// balances replica 0's stages on their machines.
std::vector<ShapeOption> EnumerateShapeOptions(const PlanRequest& request, int slots);

// Replica counts to try for at most `most`: all of them on small machine lists, else the powers
// of two and `most` itself.
std::vector<int> ReplicaCounts(int most);

// Micro-batch sizes to try for P x D: the job's fixed one, or the profiled sizes and the one
// DefaultChunkSize gives the shape.
std::set<int64_t> MicroBatchSizes(const PlanRequest& request, int stages, int replicas);

// The partition of the profile's segments into `stages` stages on `stage_machines` (replica 0's)
// that balances each segment's forward + backward of `per_replica` micro-batches of `chunk` and
// its update, each stage weighted by its machine's speed relative to the first.
std::vector<int> StagePartition(const Profile& profile,
                                const std::vector<std::string>& stage_machines, int stages,
                                int64_t chunk, int64_t per_replica);

}  // namespace mitra::planner::detail
