// Which slot of a machine each rank of the next generation takes, so that the workers already
// there keep as much of their state as they can (docs/manager.md, "State from peers").
//
// A parked worker is kept by the rank of its own slot (its local rank: a GPU stays with its
// process, parked_workers.h). Which rank that is, the grid does not care: ranks fill a machine's
// slots in any order. So a change of P from 2 x 1 (segments 0-4, 5-9) to 4 x 1 (0-1, 2-3, 4-6,
// 7-9) that leaves slot 1 to stage 1 keeps nothing there, while stage 3 there keeps three of its
// segments. Each machine's ranks are given its slots by the assignment that keeps the most state
// (segments weighed by the state they carry), and among the best the one nearest the plan's
// own order, so a shape that does not change keeps every rank where it was.
//
// Pure functions, no clock.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "manager/machine_list.h"
#include "manager/parked_workers.h"
#include "planner/grid.h"

namespace mitra::manager {

// The segments [first, end) the rank of each place of `plan` holds whole, by rank; nullopt when
// the plan does not say: no schedule or partition of its own (the program decides them), or a
// schedule whose ranks hold chunks of several stages (interleaved, zb-v).
std::optional<std::vector<HeldSegments>> SegmentsByRank(const planner::GridPlan& plan,
                                                       int segments);

// The assignment of rows to columns of the square matrix `score` with the largest sum; by row,
// its column. O(n^3).
std::vector<int> BestAssignment(const std::vector<std::vector<int64_t>>& score);

// Gives the ranks of `plan` (of a program of `segments` segments) on each machine of `machines`
// the machine's slots (their local ranks) so that `holders`, the workers on those slots now
// (each with the segments it holds), keep the most: segment i weighs `segment_weights[i]`
// (every one 1 when the vector is not one per segment). Leaves `plan` as it is when
// SegmentsByRank does not know what its ranks hold. Holders of no segment, and holders on slots
// the plan does not use, take no part.
void PlaceToKeepState(const std::vector<ParkedWorker>& holders, int segments,
                      const std::vector<int64_t>& segment_weights,
                      const std::vector<Machine>& machines, planner::GridPlan* plan);

}  // namespace mitra::manager
