#include "manager/machine_transports.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>


namespace mitra::manager {
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

Status NoSsh(const Machine& machine) {
  return Status::InvalidArgument(machine.Address() +
                               " is reached over SSH, which this build cannot do yet; use "
                               "`localhost slots=N` entries");
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
                                     launcher::ProcessRunner* local)
    : options_(std::move(options)), local_(local) {}


std::string MachineTransports::WorkerAddress(const Machine& machine) const {
  return machine.IsLocal() ? "127.0.0.1" : machine.host;
}

Result<launcher::ProcessRunner*> MachineTransports::RunnerFor(const Machine& machine) {
  if (machine.IsLocal()) return local_;
  return NoSsh(machine);
}
Status MachineTransports::Check(const Machine& machine, double) {
  if (machine.IsLocal()) return Status::Ok();
  return NoSsh(machine);
}
Status MachineTransports::KillOrphan(const Machine& machine, int64_t pid, const std::string& run_dir) {
  if (machine.IsLocal()) return KillLocalOrphan(pid, run_dir);
  return NoSsh(machine);
}
}  // namespace mitra::manager
