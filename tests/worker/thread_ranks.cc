#include "tests/worker/thread_ranks.h"

#include <gtest/gtest.h>

#include <exception>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/torch.h>

namespace mitra::testing {

worker::Placement LoopbackPlacement(int stages, int replicas, int rank, int rdzv_port,
                                    double timeout_s) {
  worker::Placement p;
  p.rank = rank;
  p.stage_map = contract::StageMap::Default(stages, replicas);
  p.rdzv_host = "127.0.0.1";
  p.host = "127.0.0.1";
  p.rdzv_port = rdzv_port;
  p.timeout_s = timeout_s;
  p.heartbeat_s = 0;
  return p;
}

void RunRanks(int world, const std::function<void(int rank)>& body) {
  torch::set_num_threads(1);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&body, rank] {
      try {
        body(rank);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << rank << " threw: " << e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

void RunWithComms(
    int stages, int replicas,
    const std::function<void(const worker::Placement& placement, worker::Comm& comm)>& body,
    double timeout_s) {
  // c10d's HashStore blocks a get until the key is set, as the TCPStore does: the groups'
  // rendezvous works unchanged.
  auto store = c10::make_intrusive<c10d::HashStore>();
  RunRanks(stages * replicas, [&](int rank) {
    const worker::Placement placement =
        LoopbackPlacement(stages, replicas, rank, /*rdzv_port=*/0, timeout_s);
    std::unique_ptr<worker::Comm> comm =
        worker::Comm::Join(placement, store, worker::Backend::kGloo);
    body(placement, *comm);
  });
}

}  // namespace mitra::testing
