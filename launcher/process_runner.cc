#include "launcher/process_runner.h"

#include "common/signal_watcher.h"

namespace mitra::launcher {

std::string ExitStatus::ToString() const {
  if (lost) return "was lost with the connection to its machine";
  if (signal != 0) return "was killed by signal " + SignalName(signal);
  return "exited with code " + std::to_string(exit_code);
}

}  // namespace mitra::launcher
