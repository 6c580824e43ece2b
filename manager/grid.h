// The job's shape: P pipeline stages x D data-parallel replicas, and where each rank goes.
//
// Ranks follow Varuna's layout: rank r is stage r mod P of replica r div P, so one pipeline's
// ranks are consecutive and land on the same machine when it has room. Ranks fill the machines
// in list order, slot by slot; slots beyond P x D stay idle.
//
// Everything here is a pure function.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace mitra::manager {

struct GridRequest {
  std::vector<int> slots_per_machine;  // in machine-list order
  int stages = 1;                      // P
  int segments = 0;                    // the program's segment count (P may not exceed it)
  int64_t global_batch = 0;            // B
  int chunk_size = 0;                  // 0: DefaultChunkSize
};

struct RankPlacement {
  int rank = 0;
  int machine = 0;     // index into the machine list
  int local_rank = 0;  // index among the ranks on that machine
  int stage = 0;
  int replica = 0;
  int64_t replica_batch = 0;  // samples of B that this rank's replica takes
};

struct GridPlan {
  int stages = 0;    // P
  int replicas = 0;  // D
  int64_t global_batch = 0;
  int chunk_size = 0;
  int total_slots = 0;
  int idle_slots = 0;  // total_slots - P * D
  std::string stage_to_rank_map;
  std::vector<RankPlacement> ranks;  // indexed by rank

  int world_size() const { return stages * replicas; }
};

// Checks the request and plans the grid: D = floor(slots / P). InvalidArgument, naming the flag
// to change, when P exceeds the segments or the slots, when B < D, or when the chunk size
// exceeds the smallest per-replica batch.
Result<GridPlan> PlanGrid(const GridRequest& request);

// Varuna's stage-to-rank map for the default layout: stage s holds ranks s, s+P, s+2P, ...;
// "0,2;1,3;" for P = 2, D = 2 (stage-major, ';' after every stage).
std::string StageToRankMap(int stages, int replicas);

// Samples of B that replica `replica` of D takes: floor(B/D), plus one for the first B mod D.
int64_t ReplicaBatch(int64_t global_batch, int replicas, int replica);

// The micro-batch size when --chunk-size is not given, from the smallest per-replica batch b:
// b for P = 1 (no pipeline, so one micro-batch is best), else max(1, b / (4 P)) so that each
// pipeline runs at least 4 P micro-batches and the fill/drain bubble stays under ~20%.
int DefaultChunkSize(int64_t min_replica_batch, int stages);

}  // namespace mitra::manager
