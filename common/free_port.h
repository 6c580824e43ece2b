// Picking a TCP port for the workers' rendezvous store.
#pragma once

#include <string>

#include "mitra/common/status.h"

namespace mitra {

// A TCP port that was free on `ipv4_address` a moment ago: binds port 0, reads the port the
// kernel chose, closes the socket. Another process may take the port before the store binds
// it; the worker then fails to rendezvous and the manager reports it. Blocks briefly.
Result<int> PickFreeTcpPort(const std::string& ipv4_address);

}  // namespace mitra
