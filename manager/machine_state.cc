#include "manager/machine_state.h"

namespace mitra::manager {

const char* MachineStateName(MachineState state) {
  switch (state) {
    case MachineState::kInUse: return "in use";
    case MachineState::kIdle: return "idle";
    case MachineState::kChecking: return "checking";
    case MachineState::kFailed: return "failed";
    case MachineState::kDrained: return "drained";
    case MachineState::kRemoved: return "removed";
  }
  return "unknown";
}

std::optional<MachineState> ParseMachineState(std::string_view name) {
  for (MachineState state : kMachineStates) {
    if (name == MachineStateName(state)) return state;
  }
  return std::nullopt;
}

}  // namespace mitra::manager
