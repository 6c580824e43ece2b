// Picking a TCP port for the workers' rendezvous store, and connecting to it once it listens.
#pragma once

#include <string>

#include "mitra/common/status.h"

namespace mitra {

// A TCP port that was free on `ipv4_address` a moment ago: binds port 0, reads the port the
// kernel chose, closes the socket. Another process may take the port before the store binds
// it; the worker then fails to rendezvous and the manager reports it. Blocks briefly.
Result<int> PickFreeTcpPort(const std::string& ipv4_address);

// A TCP connection to `host`:`port` (a name or an address; every address it resolves to is
// tried), trying again every few milliseconds while nothing accepts, for at most `timeout_s`:
// the connected socket (close-on-exec, blocking), which the caller closes. Timeout when
// nothing accepted in time, InvalidArgument when `host` does not resolve. (A worker told to
// meet a store that is about to listen connects with this rather than waiting a whole second
// between tries.)
Result<int> ConnectWhenListening(const std::string& host, int port, double timeout_s);

}  // namespace mitra
