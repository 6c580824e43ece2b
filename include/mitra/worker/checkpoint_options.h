// How a training program checkpoints (docs/checkpoint-format.md). The manager's MITRA_CHECKPOINT_*
// settings override these for a worker it starts.
#pragma once

#include <cstdint>
#include <string>

namespace mitra::worker {

struct CheckpointOptions {
  std::string dir;      // empty: no checkpoints
  int64_t every = 0;    // save every N steps (0: only at the end and on stop)
  int keep = 3;         // complete checkpoints kept; < 1 keeps all
  bool async = true;    // write in the background
};

}  // namespace mitra::worker
