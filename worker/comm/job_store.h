// The job's rendezvous store as c10d sees it: a c10d::Store on a proven connection to the
// store rank 0 hosts (rendezvous/store_server.h, docs/security.md). The process groups meet
// through it and the checkpointer counts its votes in it.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "mitra/worker/placement.h"
#include "rendezvous/job_token.h"

namespace mitra::rendezvous {
class StoreClient;
class StoreServer;
}  // namespace mitra::rendezvous

namespace mitra::worker {

class JobStore : public c10d::Store {
 public:
  // Connects to the placement's store (MITRA_RDZV_HOST:PORT) with its job token; with `host`,
  // first starts the store there, listening on that address only. Blocks up to the
  // placement's timeout while the store is not listening yet. Throws std::runtime_error
  // saying why: the port is taken, the token is refused (another job's store), no store in
  // time.
  static c10::intrusive_ptr<JobStore> Connect(const Placement& placement, bool host);
  ~JobStore() override;

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override;
  // Waits (up to the timeout) for the key, as c10d's TCPStore does.
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t value) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t getNumKeys() override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

  // Connections the hosted store closed for a wrong token, a forged frame or a deadline; 0
  // when this process does not host it.
  int64_t refused() const;

  // The tag that rank `from` of a group sends rank `to` over their connection to prove it is
  // theirs: HMAC(job token, "pair" + nonce + from + to). `nonce` is the group's own
  // (Comm::ProvePairs), so a tag seen once proves nothing in another group or generation.
  rendezvous::Bytes32 PairTag(const std::string& nonce, int from, int to) const;

  // What Connect makes (public for c10::make_intrusive): the job's token, the store this
  // process hosts (or null) and its own connection.
  JobStore(const rendezvous::JobToken& token, std::unique_ptr<rendezvous::StoreServer> server,
           std::unique_ptr<rendezvous::StoreClient> client, std::chrono::milliseconds timeout);

 private:

  rendezvous::JobToken token_;
  std::unique_ptr<rendezvous::StoreServer> server_;
  std::unique_ptr<rendezvous::StoreClient> client_;
};

}  // namespace mitra::worker
