#include "worker/state/peer_memory.h"

#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>

#include "worker/comm/comm.h"

namespace mitra::worker {
namespace {

int64_t ComputeHostKey() {
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  if (!std::getline(boot, boot_id) || boot_id.empty()) return 0;
  char pid_namespace[128] = {};
  const ssize_t n = ::readlink("/proc/self/ns/pid", pid_namespace, sizeof(pid_namespace) - 1);
  if (n <= 0) return 0;
  const int64_t key = static_cast<int64_t>(
      std::hash<std::string>{}(boot_id + " " + std::string(pid_namespace, n)) >> 1);
  return key == 0 ? 1 : key;
}

// A value this process holds for its whole life, different in every process.
const int64_t& Canary() {
  static const int64_t value = [] {
    std::random_device random;
    return (static_cast<int64_t>(random()) << 31) ^ static_cast<int64_t>(random()) ^ ::getpid();
  }();
  return value;
}

bool TurnedOff() {
  const char* setting = std::getenv("MITRA_SAME_MACHINE_COPY");
  return setting != nullptr && std::string(setting) == "0";
}

}  // namespace

ProcessAddress ThisProcess() {
  static const int64_t host_key = ComputeHostKey();
  return {host_key, static_cast<int64_t>(::getpid()),
          static_cast<int64_t>(reinterpret_cast<uintptr_t>(&Canary())), Canary()};
}

bool SameHost(const ProcessAddress& a, const ProcessAddress& b) {
  return a.host_key != 0 && a.host_key == b.host_key;
}

bool CanRead(const ProcessAddress& peer) {
  if (TurnedOff() || !SameHost(ThisProcess(), peer)) return false;
  int64_t value = 0;
  iovec local{&value, sizeof(value)};
  iovec remote{reinterpret_cast<void*>(static_cast<uintptr_t>(peer.canary_address)),
               sizeof(value)};
  const ssize_t n = ::process_vm_readv(static_cast<pid_t>(peer.pid), &local, 1, &remote, 1, 0);
  return n == static_cast<ssize_t>(sizeof(value)) && value == peer.canary_value;
}

void ReadPeerMemory(int64_t pid, int64_t address, void* into, int64_t bytes,
                    const std::string& what) {
  auto* to = static_cast<char*>(into);
  auto from = static_cast<uintptr_t>(address);
  while (bytes > 0) {
    iovec local{to, static_cast<size_t>(bytes)};
    iovec remote{reinterpret_cast<void*>(from), static_cast<size_t>(bytes)};
    const ssize_t n = ::process_vm_readv(static_cast<pid_t>(pid), &local, 1, &remote, 1, 0);
    if (n <= 0) {
      throw PeerError(what + ": copying from process " + std::to_string(pid) + " failed (" +
                      (n < 0 ? std::strerror(errno) : std::string("nothing read")) + ")");
    }
    to += n;
    from += static_cast<uintptr_t>(n);
    bytes -= n;
  }
}

}  // namespace mitra::worker
