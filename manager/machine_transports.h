// MachineTransports: the real Transports (transports.h). Machines named `localhost` run their
// workers as local processes (launcher/local_process_runner.h); every other machine is
// reached over SSH (launcher/ssh_process_runner.h), one connection per machine, opened when
// the machine is first used and opened again after it was lost.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/file_system.h"
#include "launcher/ssh_process_runner.h"
#include "manager/transports.h"

namespace mitra::manager {

struct MachineTransportsOptions {
  std::string known_hosts;  // "": ~/.ssh/known_hosts
  std::string identity;     // "": ssh-agent, then ~/.ssh/id_*
  double connect_timeout_s = 5;
};

class MachineTransports : public Transports {
 public:
  // `local` runs the localhost workers; it and `fs` (the SSH runners' log files) must outlive
  // this object.
  MachineTransports(MachineTransportsOptions options, launcher::ProcessRunner* local,
                    FileSystem* fs);
  // Closes the SSH connections. Remote workers are not killed here: the manager stops them
  // before it returns, and a manager that dies leaves them to its successor (orphans.h).
  ~MachineTransports() override;

  Result<launcher::ProcessRunner*> RunnerFor(const Machine& machine) override;
  Status Check(const Machine& machine, double timeout_s) override;
  Status KillOrphan(const Machine& machine, int64_t pid, const std::string& run_dir) override;
  std::string WorkerAddress(const Machine& machine) const override;

 private:
  // The machine's SSH runner (one per machine for the manager's life; it reconnects by itself
  // after a lost connection).
  launcher::SshProcessRunner* Remote(const Machine& machine);

  MachineTransportsOptions options_;
  launcher::ProcessRunner* local_;
  FileSystem* fs_;
  std::mutex mu_;  // guards remotes_
  std::map<std::string, std::unique_ptr<launcher::SshProcessRunner>> remotes_;
};

// Kills local process `pid` if its environment holds MITRA_RUN_DIR=`run_dir` (a worker of that
// run); waits up to 2 s for it to go. Ok when there is no such process.
Status KillLocalOrphan(int64_t pid, const std::string& run_dir);

}  // namespace mitra::manager
