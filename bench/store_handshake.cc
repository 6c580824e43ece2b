// The cost of proving the job token (docs/security.md): a worker's connection to the job's
// rendezvous store, against c10d's TCPStore client connection it replaced, in one run.
//
//   build/bin/store_handshake [--connections 200]
//
// For each store, `connections` clients connect one after the other to a store this process
// hosts on 127.0.0.1, set a key and get it back, and close; each phase is timed. Prints one
// JSON line per store and a summary with the ratios (mitra's over c10d's) and whether the
// median connection, handshake included, took at most 5 ms.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "mitra/worker/placement.h"
#include "rendezvous/job_token.h"
#include "rendezvous/store_server.h"
#include "worker/comm/job_store.h"

namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Times {
  std::vector<double> connect_s, round_trip_s;
};

void Print(const char* store, const Times& t) {
  std::printf("{\"bench\": \"store_handshake\", \"store\": \"%s\", \"connections\": %zu, "
              "\"connect_ms_median\": %.3f, \"connect_ms_worst\": %.3f, "
              "\"set_get_ms_median\": %.3f}\n",
              store, t.connect_s.size(), 1e3 * Median(t.connect_s),
              1e3 * *std::max_element(t.connect_s.begin(), t.connect_s.end()),
              1e3 * Median(t.round_trip_s));
}

// One client: connect (timed), set and get a key (timed), close.
template <typename Connect>
void Measure(Times& t, const Connect& connect) {
  const std::vector<uint8_t> value(100, 7);  // about a Gloo address
  auto start = Clock::now();
  c10::intrusive_ptr<c10d::Store> store = connect();
  t.connect_s.push_back(Since(start));
  start = Clock::now();
  store->set("key", value);
  (void)store->get("key");
  t.round_trip_s.push_back(Since(start));
}

}  // namespace

int main(int argc, char** argv) {
  int connections = 200;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--connections") connections = std::stoi(argv[i + 1]);
  }
  const std::chrono::milliseconds timeout(10000);

  Times c10d_times;
  {
    c10d::TCPStoreOptions server_options;
    server_options.port = 0;
    server_options.isServer = true;
    server_options.waitWorkers = false;
    server_options.timeout = timeout;
    c10d::TCPStore server("127.0.0.1", server_options);
    c10d::TCPStoreOptions client_options;
    client_options.port = server.getPort();
    client_options.isServer = false;
    client_options.waitWorkers = false;
    client_options.timeout = timeout;
    for (int i = 0; i < connections; ++i) {
      Measure(c10d_times, [&] {
        return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", client_options);
      });
    }
  }
  Print("c10d TCPStore", c10d_times);

  Times mitra_times;
  {
    const auto token = mitra::rendezvous::JobToken::Generate();
    auto server = mitra::rendezvous::StoreServer::Start(token, "127.0.0.1", 0);
    if (!server.ok()) {
      std::fprintf(stderr, "store_handshake: %s\n", server.status().message().c_str());
      return 1;
    }
    mitra::worker::Placement placement;
    placement.standalone = false;
    placement.job_token = token.Hex();
    placement.rdzv_host = "127.0.0.1";
    placement.rdzv_port = (*server)->port();
    placement.timeout_s = 10;
    for (int i = 0; i < connections; ++i) {
      Measure(mitra_times, [&] { return mitra::worker::JobStore::Connect(placement, false); });
    }
  }
  Print("mitra JobStore", mitra_times);

  const double mitra_connect = Median(mitra_times.connect_s);
  std::printf("{\"bench\": \"store_handshake\", \"connect_ratio\": %.2f, \"set_get_ratio\": %.2f, "
              "\"connect_within_5_ms\": %s}\n",
              mitra_connect / Median(c10d_times.connect_s),
              Median(mitra_times.round_trip_s) / Median(c10d_times.round_trip_s),
              mitra_connect <= 0.005 ? "true" : "false");
  return 0;
}
