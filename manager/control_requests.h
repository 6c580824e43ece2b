// The manager's answers on its control socket (control_socket.h): `mitra stop` and
// `mitra status`. The server reads a request line; this decides what it means.
//
//   {"command":"stop"}    asks the job to stop as Ctrl-C does; a second one says it is under way
//   {"command":"status"}  the run's StatusReport (status_report.h), plus the manager's pid and
//                         run directory
//   {"command":"drain","machine":ADDRESS}
//                         moves the job off a machine of the list (a planned morph) and keeps it
//                         off until its line changes; an address the list lacks is refused
//   anything else         {"ok":false,"error":...} naming the commands there are
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "common/json.h"

namespace mitra::manager {

class ControlRequests {
 public:
  struct Hooks {
    // Asks the run to stop (the same event as Ctrl-C); called on every `stop` (the run's
    // controller records a repeated one as already under way).
    std::function<void()> stop;
    // The run's status snapshot; {"state":"starting"} before the run loop exists.
    std::function<JsonObject()> status;
    // Asks the run to drain the machine at `address` (one the status lists).
    std::function<void(const std::string& address)> drain;
  };

  ControlRequests(Hooks hooks, std::string run_dir, int64_t manager_pid);

  // The response line to `request`. Thread-safe when the hooks are.
  std::string Answer(const JsonObject& request);

 private:
  std::string Drain(const std::string& address);
  static std::string Refused(const std::string& error);

  const Hooks hooks_;
  const std::string run_dir_;
  const int64_t manager_pid_;
  std::atomic<bool> stop_asked_{false};
};

}  // namespace mitra::manager
