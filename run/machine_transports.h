// MachineTransports: the real Transports (transports.h). Machines named `localhost` run their
// workers as local processes (launcher/local_process_runner.h); every other machine is
// reached over SSH (launcher/ssh_process_runner.h), one connection per machine, opened when
// the machine is first used and opened again after it was lost, or, with `--launcher srun`,
// through Slurm: each worker a job step of the allocation on that node
// (launcher/srun_process_runner.h), its health check `srun true` there.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/file_system.h"
#include "launcher/srun_process_runner.h"
#include "launcher/ssh_process_runner.h"
#include "run/transports.h"

namespace mitra::run {

struct MachineTransportsOptions {
  std::string known_hosts;  // "": ~/.ssh/known_hosts
  std::string identity;     // "": ssh-agent, then ~/.ssh/id_*
  double connect_timeout_s = 5;
  // Set: machines other than `localhost` are Slurm nodes of this allocation, reached with srun
  // (its `node` is each machine's host); unset: SSH.
  std::optional<launcher::SrunOptions> srun;
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

  Result<launcher::ProcessRunner*> RunnerFor(const manager::Machine& machine) override;
  Status Check(const manager::Machine& machine, double timeout_s) override;
  Status KillOrphan(const manager::Machine& machine, int64_t pid, const std::string& run_dir) override;
  std::string WorkerAddress(const manager::Machine& machine) const override;

 private:
  // The machine's SSH runner (one per machine for the manager's life; it reconnects by itself
  // after a lost connection).
  launcher::SshProcessRunner* Remote(const manager::Machine& machine);
  // The machine's srun runner (options_.srun set), made when first asked for.
  launcher::SrunProcessRunner* Slurm(const manager::Machine& machine);

  MachineTransportsOptions options_;
  launcher::ProcessRunner* local_;
  FileSystem* fs_;
  std::mutex mu_;  // guards remotes_ and steps_
  std::map<std::string, std::unique_ptr<launcher::SshProcessRunner>> remotes_;
  std::map<std::string, std::unique_ptr<launcher::SrunProcessRunner>> steps_;
};

// Kills local process `pid` if its environment holds MITRA_RUN_DIR=`run_dir` (a worker of that
// run); waits up to 2 s for it to go. Ok when there is no such process.
Status KillLocalOrphan(int64_t pid, const std::string& run_dir);

}  // namespace mitra::run
