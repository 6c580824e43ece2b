#include "manager/control_requests.h"

#include <utility>
#include <vector>

#include "common/strings.h"
#include "manager/status_report.h"

namespace mitra::manager {

ControlRequests::ControlRequests(Hooks hooks, std::string run_dir, int64_t manager_pid)
    : hooks_(std::move(hooks)), run_dir_(std::move(run_dir)), manager_pid_(manager_pid) {}

std::string ControlRequests::Answer(const JsonObject& request) {
  const std::string command = request.GetString("command").value_or("");
  if (command == kStopCommand) {
    const bool again = stop_asked_.exchange(true);
    const StatusReport before =
        StatusReport::FromJson(hooks_.status ? hooks_.status() : JsonObject());
    if (hooks_.stop) hooks_.stop();
    std::string message = "stopping: every worker will checkpoint after the same step";
    if (before.state == "waiting") {
      message = "stopping: no worker runs (the job waits for machines), so the manager exits now";
    } else if (again) {
      message = "already stopping: the workers are checkpointing; the manager exits once they "
                "have (Ctrl-C twice on it kills them)";
    }
    return JsonObject().SetBool("ok", true).SetString("message", message).ToJson();
  }
  if (command == kStatusCommand) {
    JsonObject status = JsonObject().SetBool("ok", true);
    const JsonObject snapshot =
        hooks_.status ? hooks_.status() : JsonObject().SetString("state", "starting");
    for (const auto& [key, value] : snapshot.fields()) status.Set(key, value);
    return status.SetInt("manager_pid", manager_pid_).SetString("run_dir", run_dir_).ToJson();
  }
  if (command == kDrainCommand) return Drain(request.GetString("machine").value_or(""));
  return Refused("unknown command '" + command + "' (" + kStatusCommand + ", " + kStopCommand +
                 ", " + kDrainCommand + ")");
}

std::string ControlRequests::Drain(const std::string& address) {
  const StatusReport status =
      StatusReport::FromJson(hooks_.status ? hooks_.status() : JsonObject());
  if (status.machines.empty() || !hooks_.drain) {
    return Refused("the job has not started yet: drain " + address + " once `mitra status` "
                   "lists the machines");
  }
  std::vector<std::string> listed;
  for (const MachineStatus& m : status.machines) {
    if (m.state == MachineStateName(MachineState::kRemoved)) continue;
    if (m.address == address) {
      if (m.state == MachineStateName(MachineState::kDrained)) {
        return JsonObject()
            .SetBool("ok", true)
            .SetString("message", address + " is drained already (" + m.reason + ")")
            .ToJson();
      }
      hooks_.drain(address);
      return JsonObject()
          .SetBool("ok", true)
          .SetString("message",
                     "draining " + address + ": the job moves off it with a planned morph and "
                     "stays off until its line in the machine list changes")
          .ToJson();
    }
    listed.push_back(m.address);
  }
  return Refused(address.empty() ? "drain needs a machine: one of " + Join(listed, ", ")
                                 : "no machine of the list is " + address + "; the list has " +
                                       Join(listed, ", "));
}

std::string ControlRequests::Refused(const std::string& error) {
  return JsonObject().SetBool("ok", false).SetString("error", error).ToJson();
}

}  // namespace mitra::manager
