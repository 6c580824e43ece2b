#include "run/machine_transports.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>

#include "launcher/local_command.h"

namespace mitra::run {
namespace {

// Whether the NUL-separated environment `environ` holds exactly `entry`.
bool HoldsEntry(const std::string& environ, const std::string& entry) {
  size_t start = 0;
  while (start < environ.size()) {
    size_t end = environ.find('\0', start);
    if (end == std::string::npos) end = environ.size();
    if (environ.compare(start, end - start, entry) == 0) return true;
    start = end + 1;
  }
  return false;
}

}  // namespace

Status KillLocalOrphan(int64_t pid, const std::string& run_dir) {
  if (pid <= 1) return Status::InvalidArgument("pid " + std::to_string(pid) + " is not a worker");
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  if (!in) return Status::Ok();  // gone, or never ours to read
  const std::string environ((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!HoldsEntry(environ, "MITRA_RUN_DIR=" + run_dir)) return Status::Ok();  // pid reused
  if (::kill(static_cast<pid_t>(pid), SIGKILL) != 0 && errno != ESRCH) {
    return Status::Internal("cannot kill worker pid " + std::to_string(pid) + ": " +
                            std::strerror(errno));
  }
  // Not our child (its parent was the manager that died): wait for it to disappear.
  for (int i = 0; i < 200; ++i) {
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return Status::Ok();
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const size_t paren = text.rfind(')');
    if (paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'Z') {
      return Status::Ok();  // a zombie waiting for its reaper: dead
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return Status::Internal("worker pid " + std::to_string(pid) + " survived SIGKILL for 2 s");
}

MachineTransports::MachineTransports(MachineTransportsOptions options,
                                     launcher::ProcessRunner* local, FileSystem* fs)
    : options_(std::move(options)), local_(local), fs_(fs) {}

MachineTransports::~MachineTransports() = default;

std::string MachineTransports::WorkerAddress(const manager::Machine& machine) const {
  // `localhost` in any form (also an SSH entry such as root@localhost:2222) is this machine's
  // loopback address, which the rendezvous can bind and every local rank reach.
  return machine.IsLocal() || machine.host == "localhost" ? "127.0.0.1" : machine.host;
}

Result<launcher::ProcessRunner*> MachineTransports::RunnerFor(const manager::Machine& machine) {
  if (machine.IsLocal()) return local_;
  if (options_.srun) return static_cast<launcher::ProcessRunner*>(Slurm(machine));
  launcher::SshProcessRunner* remote = Remote(machine);
  if (Status s = remote->Connect(); !s.ok()) return s;
  return static_cast<launcher::ProcessRunner*>(remote);
}

Status MachineTransports::Check(const manager::Machine& machine, double timeout_s) {
  if (machine.IsLocal()) return Status::Ok();
  if (options_.srun) return Slurm(machine)->Check(timeout_s);
  launcher::SshProcessRunner* remote = Remote(machine);
  if (Status s = remote->Connect(); !s.ok()) return s;
  Result<launcher::CommandResult> result = remote->RunCommand({"true"}, timeout_s);
  if (!result.ok()) return result.status();
  if (!result->ok()) {
    return Status::Unavailable("`true` failed on " + machine.Address() + ": " +
                               (result->err.empty() ? "exit code " +
                                                          std::to_string(result->exit_code)
                                                    : result->err));
  }
  return Status::Ok();
}

Status MachineTransports::KillOrphan(const manager::Machine& machine, int64_t pid,
                                     const std::string& run_dir) {
  if (machine.IsLocal()) return KillLocalOrphan(pid, run_dir);
  if (options_.srun) return Slurm(machine)->KillOrphan(pid, run_dir);
  launcher::SshProcessRunner* remote = Remote(machine);
  const std::string pid_text = std::to_string(pid);
  // Two commands, each an argv quoted word by word: nothing reaches a remote shell as syntax.
  Result<launcher::CommandResult> ours = remote->RunCommand(
      {"grep", "-qzx", "MITRA_RUN_DIR=" + run_dir, "/proc/" + pid_text + "/environ"},
      options_.connect_timeout_s);
  if (!ours.ok()) return ours.status();
  if (!ours->ok()) return Status::Ok();  // gone, or not a worker of this run
  Result<launcher::CommandResult> killed =
      remote->RunCommand({"kill", "-KILL", pid_text}, options_.connect_timeout_s);
  if (!killed.ok()) return killed.status();
  return Status::Ok();
}

launcher::SshProcessRunner* MachineTransports::Remote(const manager::Machine& machine) {
  std::lock_guard<std::mutex> lock(mu_);
  std::unique_ptr<launcher::SshProcessRunner>& runner = remotes_[machine.Address()];
  if (!runner) {
    launcher::SshProcessRunnerOptions ssh;
    ssh.ssh.user = machine.user;
    ssh.ssh.host = machine.host;
    ssh.ssh.port = machine.port;
    ssh.ssh.known_hosts_file = options_.known_hosts;
    if (!options_.identity.empty()) ssh.ssh.identity_files = {options_.identity};
    ssh.ssh.connect_timeout_s = options_.connect_timeout_s;
    // A keepalive every 0.75 s, three unanswered: a machine that vanishes is noticed in ~2.3 s.
    ssh.ssh.keepalive_interval_s = 0.75;
    runner = std::make_unique<launcher::SshProcessRunner>(ssh, fs_);
  }
  return runner.get();
}

launcher::SrunProcessRunner* MachineTransports::Slurm(const manager::Machine& machine) {
  std::lock_guard<std::mutex> lock(mu_);
  std::unique_ptr<launcher::SrunProcessRunner>& runner = steps_[machine.Address()];
  if (!runner) {
    launcher::SrunOptions srun = *options_.srun;
    srun.node = machine.host;
    runner = std::make_unique<launcher::SrunProcessRunner>(srun, local_, launcher::RunLocalCommand);
  }
  return runner.get();
}

}  // namespace mitra::run
