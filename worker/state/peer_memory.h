// Copying straight from the memory of another process of the same machine (process_vm_readv),
// which a state exchange between two ranks of one machine uses instead of the job's backend
// (docs/manager.md, "State from peers"): one copy, on the reader's core, where the loopback
// network copies twice and keeps a core busy on each side.
//
// Whether a rank may read a peer: both see the same processes (one machine and one pid
// namespace, which the host key tells apart) and the kernel lets the reader read the peer (the same
// user, no ptrace restriction). CanRead proves it on a value of the peer's that the reader knows
// before anything relies on it; MITRA_SAME_MACHINE_COPY=0 turns the path off for a process.
#pragma once

#include <cstdint>
#include <string>

namespace mitra::worker {

// Where a process is, as its peers need to know to read it: gathered from every rank.
struct ProcessAddress {
  int64_t host_key = 0;        // the same for processes that see the same pids (HostKey)
  int64_t pid = 0;
  int64_t canary_address = 0;  // of a value the process holds for its whole life
  int64_t canary_value = 0;    // that value
};

// This process: its host key, pid and canary. The canary's value differs from process to
// process.
ProcessAddress ThisProcess();

// Whether two processes see the same pids: the same boot of the same kernel and the same pid
// namespace. False when either key is 0 (not known).
bool SameHost(const ProcessAddress& a, const ProcessAddress& b);

// Whether this process may copy from `peer`'s memory: the same host, the path not turned off
// here (MITRA_SAME_MACHINE_COPY=0), and reading the peer's canary gives its value. Blocks for
// one system call.
bool CanRead(const ProcessAddress& peer);

// Copies `bytes` bytes at `address` in process `pid` into `into`. Throws PeerError naming
// `what` when the process is gone or the read fails or comes up short.
void ReadPeerMemory(int64_t pid, int64_t address, void* into, int64_t bytes,
                    const std::string& what);

}  // namespace mitra::worker
