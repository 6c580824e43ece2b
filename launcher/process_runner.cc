#include "launcher/process_runner.h"

#include "common/signal_watcher.h"

namespace mitra::launcher {

std::string ExitStatus::ToString() const {
  if (lost) return "was lost with the connection to its machine";
  if (signal != 0) return "was killed by signal " + SignalName(signal);
  return "exited with code " + std::to_string(exit_code);
}

Status CheckSentLine(const std::string& line) {
  if (line.find('\n') != std::string::npos) {
    return Status::InvalidArgument("a line sent to a process must not hold a newline (at byte " +
                                   std::to_string(line.find('\n')) + ")");
  }
  if (line.size() > kMaxSentLine) {
    return Status::InvalidArgument("a line sent to a process is " + std::to_string(line.size()) +
                                   " bytes; at most " + std::to_string(kMaxSentLine) +
                                   " are taken");
  }
  return Status::Ok();
}

}  // namespace mitra::launcher
