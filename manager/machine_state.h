// A machine's state as the manager shows it: in `mitra status`, state.json and the metrics'
// `mitra_machines{state=...}`. Each name is written once, here; readers of another process's
// answer (manager/status_report.h) compare its text with these names.
#pragma once

#include <optional>
#include <ostream>
#include <string_view>

namespace mitra::manager {

enum class MachineState {
  kInUse,     // some of its slots hold ranks of the job
  kIdle,      // listed and healthy, no rank on it
  kChecking,  // a health check is running
  kFailed,    // its check failed: not used until the next one passes
  kDrained,   // given up by the user (`drain` in the list, `mitra drain`) or by the manager
  kRemoved,   // gone from the list while ranks of the job still run there
};

inline constexpr MachineState kMachineStates[] = {
    MachineState::kInUse,  MachineState::kIdle,    MachineState::kChecking,
    MachineState::kFailed, MachineState::kDrained, MachineState::kRemoved};

// "in use", "idle", "checking", "failed", "drained", "removed".
const char* MachineStateName(MachineState state);
// The state a name says; none for a name that is not one of them.
std::optional<MachineState> ParseMachineState(std::string_view name);

inline std::ostream& operator<<(std::ostream& out, MachineState state) {
  return out << MachineStateName(state);
}

}  // namespace mitra::manager
