// StoreServer: the job's rendezvous store, hosted by rank 0 (docs/security.md). The ranks'
// process groups meet through it (Gloo's addresses) and the checkpointer counts its votes in
// it; worker/comm/job_store.h puts c10d's Store interface on a client of it.
//
// It admits only the job's own: every connection must prove the job token (wire.h) within
// handshake_timeout_s or is closed, and each frame is checked against the session's key. It
// listens on the address it is given (the machine's address in the placement; loopback for a
// local job), never on every interface. No one client can stall or exhaust it: one thread
// serves every connection with poll(), reads and writes never block, a frame's length is
// checked before its bytes are kept, a frame begun must be whole within frame_timeout_s,
// unproven connections are capped (a new one takes the place of the oldest), and the values it
// holds are capped in bytes. What each request does is a StoreTable's (store_table.h); this
// class moves the bytes and keeps the time.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "mitra/common/status.h"
#include "rendezvous/job_token.h"

namespace mitra::rendezvous {

struct StoreServerOptions {
  double handshake_timeout_s = 10;  // from accept to a proven handshake
  double frame_timeout_s = 10;      // from a frame's first byte to its last
  size_t max_unproven = 64;         // connections still to prove the token
  size_t max_connections = 65536;   // past this, new ones wait in the listen backlog
  size_t max_store_bytes = size_t{256} << 20;  // keys and values held; a set past it fails
  // Told, on the server's thread, of each connection closed for a wrong proof, a malformed
  // or forged frame, or a deadline: the peer's address and why. Must be quick.
  std::function<void(const std::string& peer, const std::string& why)> on_refused;
};

// What the server has done since it started.
struct StoreServerCounts {
  int64_t proven = 0;   // connections that proved the token
  int64_t refused = 0;  // closed for a wrong proof, a bad frame or a deadline
};

class StoreServer {
 public:
  // Listens on `address` (an IPv4 address, or a name that resolves to one of this machine's)
  // at `port` (0: one the kernel picks; port() says which) and serves on a thread of its own.
  // Errors: InvalidArgument when `address` does not resolve to an IPv4 address; IoError when
  // it cannot be bound (the port is taken, the address is not this machine's). Blocks only
  // for the bind.
  static Result<std::unique_ptr<StoreServer>> Start(const JobToken& token,
                                                    const std::string& address, int port,
                                                    StoreServerOptions options = {});
  // Closes every connection and the listening socket and joins the thread. Waits in the store
  // see their connections close.
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const { return port_; }
  StoreServerCounts counts() const { return {proven_.load(), refused_.load()}; }

 private:
  class Loop;
  StoreServer(int listen_fd, int wake_fd, int port, std::unique_ptr<Loop> loop);

  int listen_fd_, wake_fd_, port_;
  std::unique_ptr<Loop> loop_;
  std::atomic<int64_t> proven_{0}, refused_{0};
  std::thread thread_;
};

// The IPv4 address `host` (a name or an address) resolves to, in dotted form.
Result<std::string> ResolveIpv4(const std::string& host);

}  // namespace mitra::rendezvous
