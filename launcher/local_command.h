// RunLocalCommand: runs a short command on this machine to its end and collects its output, for
// the tools a runner drives rather than the workers it starts (Slurm's `srun true` health check
// and `scancel --signal`). Workers go through LocalProcessRunner.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "launcher/process_runner.h"
#include "mitra/common/status.h"

namespace mitra::launcher {

// Runs argv[0] (looked up on PATH of `environment`, or of this process when `environment` is
// empty) with `environment` as its whole environment (empty: this process's), stdin from
// /dev/null, and waits for it. Thread-safe; blocks up to `timeout_s`, after which the command is
// killed (SIGKILL) and Timeout is returned. Unavailable when it cannot be started (the program
// is missing). Output beyond 1 MiB per stream is dropped.
Result<CommandResult> RunLocalCommand(const std::vector<std::string>& argv,
                                      const std::map<std::string, std::string>& environment,
                                      double timeout_s);

}  // namespace mitra::launcher
