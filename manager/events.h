// What the manager's loop reacts to. Producers on other threads (the process runner's
// watchers, the signal watcher) push Events onto one EventQueue; only the loop pops.
#pragma once

#include <variant>

#include "common/blocking_queue.h"
#include "launcher/process_runner.h"

namespace mitra::manager {

// Output or exit of the worker with rank `rank`.
struct WorkerEvent {
  int rank = 0;
  launcher::ProcessEvent event;
};

// SIGINT or SIGTERM reached the manager.
struct StopRequested {
  int signal_number = 0;
};

using Event = std::variant<WorkerEvent, StopRequested>;
using EventQueue = BlockingQueue<Event>;

}  // namespace mitra::manager
