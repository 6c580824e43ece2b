// Asking the program for its shape before the job starts.
//
// The manager runs the program once with MITRA_DESCRIBE=1; a mitra program prints
//   @mitra {"event":"describe","segments":N,"tokens_per_sample":T}
// and exits 0 without training. The segment count bounds --nstages.
#pragma once

#include "common/clock.h"
#include "common/status.h"
#include "launcher/process_runner.h"

namespace mitra::manager {

struct ProgramDescription {
  int segments = 0;
  double tokens_per_sample = 0;  // 0 when the program does not say
};

// Starts `spec` (whose environment should come from DescribeEnvironment) and waits for it to
// exit, at most `timeout_s` (then kills it). Blocks. InvalidArgument when the program fails,
// prints no valid describe record, or times out; the message quotes its last output lines.
Result<ProgramDescription> DescribeProgram(launcher::ProcessRunner& runner,
                                           const launcher::ProcessSpec& spec, Clock& clock,
                                           double timeout_s);

}  // namespace mitra::manager
