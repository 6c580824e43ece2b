// Orphans: workers of a manager that died (kill -9, a crash, a reboot of its machine) are still
// running on their machines, attached to nothing. A manager started again on the same run
// directory finds them in the state.json its predecessor left and kills them before it
// launches anything, so no two generations ever train at once.
#pragma once

#include <ostream>
#include <string>

#include "common/file_system.h"
#include "run/run_dir.h"
#include "run/transports.h"

namespace mitra::run {

// Reads RUN_DIR/state.json. When the run it describes had not ended (state other than done,
// stopped, failed), kills every worker it lists (Transports::KillOrphan checks that each pid
// is still a worker of this run directory) and says so on `out`. Returns how many workers were
// listed; problems with single machines are reported on `out` and do not stop the others. The
// caller must hold the run directory (no live manager uses it: see ControlServer).
int KillOrphans(FileSystem& fs, const RunDir& run_dir, Transports& transports, std::ostream& out);

}  // namespace mitra::run
