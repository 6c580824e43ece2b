// `mitra checkpoint list|verify DIR`: what a checkpoint directory holds, and whether it is
// sound. `mitra checkpoint export DIR OUT.pt`: one checkpoint as a single file for Python.
#pragma once

#include <ostream>

#include "cli/run_options.h"

namespace mitra::cli {

// list: one line per checkpoint, newest first (step, the shape that wrote it, size, and
// whether it verifies); partial directories are shown as ignored. Exit 0, or 2 when DIR is not
// a directory. verify: checks every listed checkpoint's manifest and file checksums; exit 0
// when all verify, 1 when one does not (each named with its damaged file).
// export: DIR is a checkpoint directory (its newest checkpoint that verifies is taken) or one
// step-N directory; every checksum is verified first and a damaged checkpoint is refused (exit
// 2, naming the file); OUT.pt is then written (PyTorch's zip format, renamed into place when
// complete) as {"model": {full parameter name: tensor}, "optimizer": {"exp_avg": {...},
// "exp_avg_sq": {...}, "step": {...}}, "trainer": {"step": ..., "rng_state": ..., ...}}.
// Exit 1 when writing fails.
int CheckpointCommand(const CheckpointCommandOptions& options, std::ostream& out,
                      std::ostream& err);

}  // namespace mitra::cli
