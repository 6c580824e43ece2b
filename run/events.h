// What the manager's loop reacts to. Producers on other threads (the process runners'
// watchers, the signal watcher, the machine-list watcher, health checks, the control socket)
// push Events onto one EventQueue; only the loop pops.
#pragma once

#include <cstdint>
#include <string>
#include <variant>

#include "common/blocking_queue.h"
#include "launcher/process_runner.h"
#include "manager/controller.h"

namespace mitra::run {

// Output or exit of the worker with rank `rank` of generation `generation` (the controller's
// numbering) when it was started; `runner` started it (the event carries its id). A parked
// worker kept by a later generation goes on under another generation and rank: the loop
// routes its events there.
struct WorkerEvent {
  int64_t generation = 0;
  int rank = 0;
  launcher::ProcessEvent event;
  const launcher::ProcessRunner* runner = nullptr;
};

// SIGINT or SIGTERM reached the manager (signal_number), or `mitra stop` asked (0).
struct StopRequested {
  int signal_number = 0;
};

// The machine list file has new contents (not parsed yet).
struct MachineListEdited {
  std::string contents;
};

// The preemption command (--preemption-command) ended on `address`: exit status 0 means the
// machine will be taken.
struct PreemptionChecked {
  std::string address;
  launcher::ExitStatus exit;
};

using Event = std::variant<WorkerEvent, StopRequested, MachineListEdited, manager::HostChecked,
                           manager::DrainMachine, PreemptionChecked>;
using EventQueue = BlockingQueue<Event>;

}  // namespace mitra::run
