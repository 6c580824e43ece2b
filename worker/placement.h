// Placement: a worker's place in the pipeline x data-parallel grid, read in one call.
//
// The manager passes it through the environment (docs/worker-contract.md). A program started
// by hand, without MITRA_RANK, gets a 1 x 1 placement with a free local rendezvous port, so the
// same binary runs alone for debugging.
#pragma once

#include <cstdint>
#include <string>

#include "mitra/common/status.h"
#include "mitra/cutpoint/stage_map.h"

namespace mitra::worker {

struct Placement {
  int rank = 0;
  int local_rank = 0;
  cutpoint::StageMap stage_map = cutpoint::StageMap::Default(1, 1);
  int chunk_size = 0;          // micro-batch size; 0: the program's default
  int64_t global_batch = 0;    // 0: the program's default
  int64_t max_steps = 0;       // 0: the program's default
  int64_t resume_step = 0;
  std::string rdzv_host = "127.0.0.1";
  int rdzv_port = 0;
  int64_t generation = 0;
  std::string host = "127.0.0.1";  // address Gloo binds to
  int threads = 1;                 // LibTorch intra-op threads
  double timeout_s = 30;           // every blocking wait
  std::string run_dir;
  std::string checkpoint_dir;      // empty: the program's own setting
  int64_t checkpoint_every = -1;   // -1: the program's own setting
  int64_t keep_checkpoints = -1;   // -1: the program's own setting
  bool standalone = true;          // not started by the manager
  // The planner's choices (MITRA_SCHEDULE, MITRA_RECOMPUTE, MITRA_PARTITION); empty or unset:
  // the program's own settings.
  std::string schedule;
  int recompute = -1;  // -1 unset, else 0 or 1
  std::string partition;

  int stage() const { return stage_map.PositionOf(rank).stage; }
  int replica() const { return stage_map.PositionOf(rank).replica; }
  int num_stages() const { return stage_map.num_stages(); }
  int num_replicas() const { return stage_map.num_replicas(); }
  int world_size() const { return stage_map.world_size(); }

  // Reads MITRA_* variables. Malformed values are an InvalidArgument naming the variable.
  static Result<Placement> FromEnvironment();
};

// True when the manager asked the program only to describe itself (MITRA_DESCRIBE=1).
bool DescribeRequested();

}  // namespace mitra::worker
