#include "manager/control_requests.h"

#include <utility>

#include "manager/status_report.h"

namespace mitra::manager {

ControlRequests::ControlRequests(Hooks hooks, std::string run_dir, int64_t manager_pid)
    : hooks_(std::move(hooks)), run_dir_(std::move(run_dir)), manager_pid_(manager_pid) {}

std::string ControlRequests::Answer(const JsonObject& request) {
  const std::string command = request.GetString("command").value_or("");
  if (command == kStopCommand) {
    const bool again = stop_asked_.exchange(true);
    if (hooks_.stop) hooks_.stop();
    return JsonObject()
        .SetBool("ok", true)
        .SetString("message",
                   again ? "already stopping: the workers are checkpointing; the manager exits "
                           "once they have (Ctrl-C twice on it kills them)"
                         : "stopping: every worker will checkpoint after the same step")
        .ToJson();
  }
  if (command == kStatusCommand) {
    JsonObject status = JsonObject().SetBool("ok", true);
    const JsonObject snapshot =
        hooks_.status ? hooks_.status() : JsonObject().SetString("state", "starting");
    for (const auto& [key, value] : snapshot.fields()) status.Set(key, value);
    return status.SetInt("manager_pid", manager_pid_).SetString("run_dir", run_dir_).ToJson();
  }
  return JsonObject()
      .SetBool("ok", false)
      .SetString("error", "unknown command '" + command + "' (" + kStatusCommand + ", " +
                              kStopCommand + ")")
      .ToJson();
}

}  // namespace mitra::manager
