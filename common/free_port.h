// Picking a TCP port for the workers' rendezvous store, and waiting for it to listen.
#pragma once

#include <string>

#include "mitra/common/status.h"

namespace mitra {

// A TCP port that was free on `ipv4_address` a moment ago: binds port 0, reads the port the
// kernel chose, closes the socket. Another process may take the port before the store binds
// it; the worker then fails to rendezvous and the manager reports it. Blocks briefly.
Result<int> PickFreeTcpPort(const std::string& ipv4_address);

// Waits until something accepts TCP connections on `host`:`port` (a name or an address), trying
// every few milliseconds, for at most `timeout_s`; the test connection is closed at once.
// Timeout when nothing listened in time, InvalidArgument when `host` does not resolve.
// (c10d's store client, when refused, tries again only a second later: a worker that knows
// the store is about to listen waits here first.)
Status WaitUntilListening(const std::string& host, int port, double timeout_s);

}  // namespace mitra
