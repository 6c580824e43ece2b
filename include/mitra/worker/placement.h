// Placement: a worker's place in the pipeline x data-parallel grid, read in one call
// (Placement::FromEnvironment). The contract itself, shared with the manager and free of
// LibTorch, is mitra/contract/placement.h.
#pragma once

#include "mitra/contract/placement.h"

namespace mitra::worker {

using contract::DescribeRequested;
using contract::StandbyRequested;
using contract::Placement;

}  // namespace mitra::worker
