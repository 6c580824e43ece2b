// `mitra checkpoint list|verify DIR`: what a checkpoint directory holds, and whether it is sound.
#pragma once

#include <ostream>

#include "manager/run_options.h"

namespace mitra::manager {

// list: one line per checkpoint, newest first (step, the shape that wrote it, size, and
// whether it verifies); partial directories are shown as ignored. Exit 0, or 2 when DIR is not
// a directory. verify: checks every listed checkpoint's manifest and file checksums; exit 0
// when all verify, 1 when one does not (each named with its damaged file).
int CheckpointCommand(const CheckpointCommandOptions& options, std::ostream& out,
                      std::ostream& err);

}  // namespace mitra::manager
