// StoreClient: one connection to the job's rendezvous store (store_server.h), proven with the
// job token. worker/comm/job_store.h puts c10d's Store interface on it.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "mitra/common/status.h"
#include "rendezvous/job_token.h"
#include "rendezvous/wire.h"

namespace mitra::rendezvous {

class StoreClient {
 public:
  // Connects to `host`:`port` and proves the token; rank 0 may not be listening yet, so a
  // refused connection is tried again every few milliseconds, and so is one the store closes
  // before greeting it (it gave the place to a newer connection). Blocks up to `timeout_s`.
  // Errors: InvalidArgument when `host` does not resolve; Timeout when nothing answered in
  // time; Unavailable when the store closed the connection at the proof (its job's token is
  // another: the ranks were given different tokens, or another job took the port) or is not
  // a mitra store, or its answer did not prove it holds the token.
  static Result<std::unique_ptr<StoreClient>> Connect(const JobToken& token,
                                                      const std::string& host, int port,
                                                      double timeout_s);
  ~StoreClient();
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  // Sends `request` and waits up to `timeout_s` for its response. Thread-safe: calls take
  // turns. Errors: Timeout, or Unavailable when the connection closed or a frame was wrong;
  // after either the connection is closed and every later call fails the same way.
  Result<Response> Call(const Request& request, double timeout_s);

  const std::string& address() const { return address_; }

 private:
  StoreClient(int fd, std::string address, Channel channel);
  // One connection and handshake; Connect tries again while the store closes them unread.
  static Result<std::unique_ptr<StoreClient>> TryConnect(
      const JobToken& token, const std::string& host, int port,
      std::chrono::steady_clock::time_point deadline);
  Status SendAll(const std::string& bytes, double timeout_s);

  int fd_;
  std::string address_;  // "host:port", for messages
  std::mutex mutex_;
  Channel channel_;
  std::optional<Status> broken_;
};

}  // namespace mitra::rendezvous
