// Transports: how the manager reaches a machine of the list. The seam between the manager's
// loop and the launchers: local processes for `localhost`, SSH for the rest (launcher/).
#pragma once

#include <cstdint>
#include <string>

#include "launcher/process_runner.h"
#include "manager/machine_list.h"
#include "mitra/common/status.h"

namespace mitra::run {

// Implementations are thread-safe: the loop starts and signals workers while health checks run
// on threads of their own.
class Transports {
 public:
  virtual ~Transports() = default;

  // The runner that starts processes on `machine`. It is owned by the Transports and stays
  // valid until the Transports is destroyed. Fails (naming the machine and the fix) when the
  // machine cannot be reached. May block for a connection (seconds at most).
  virtual Result<launcher::ProcessRunner*> RunnerFor(const manager::Machine& machine) = 0;

  // Connects to the machine and runs a trivial command. Blocks up to `timeout_s`.
  virtual Status Check(const manager::Machine& machine, double timeout_s) = 0;

  // Kills process `pid` on `machine` if it is a worker of the run in `run_dir` (its
  // environment holds MITRA_RUN_DIR=run_dir); leaves any other process alone. Ok when the
  // process is gone already. Used when a manager restarts on the run directory of a manager that
  // died, to leave no orphan.
  virtual Status KillOrphan(const manager::Machine& machine, int64_t pid, const std::string& run_dir) = 0;

  // The address a worker on `machine` binds to and others reach it at (MITRA_HOST); an IPv4
  // address for every machine on this one (127.x.y.z).
  virtual std::string WorkerAddress(const manager::Machine& machine) const = 0;
};

}  // namespace mitra::run
