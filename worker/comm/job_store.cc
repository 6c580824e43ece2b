#include "worker/comm/job_store.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/duration_text.h"
#include "rendezvous/store_client.h"
#include "rendezvous/store_server.h"
#include "worker/comm/report.h"

namespace mitra::worker {
namespace {

using rendezvous::Op;
using rendezvous::Reply;
using rendezvous::Request;
using rendezvous::Response;

std::vector<uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string Text(const std::vector<uint8_t>& v) { return {v.begin(), v.end()}; }

double Seconds(std::chrono::milliseconds ms) { return static_cast<double>(ms.count()) / 1000.0; }

// Tells the log and the manager (a `warning` record: its terminal and events.jsonl) of the
// first connections refused and then of every hundredth, so that a flood of them cannot fill
// either. The store's thread only queues the message (and drops it when 16 wait): writing it
// may block on the manager's pipe, and the store must not; a thread of its own writes.
void LogRefused(const std::string& peer, const std::string& why) {
  struct Queue {
    std::mutex mu;
    std::condition_variable ready;
    std::deque<std::string> messages;
  };
  static Queue* const queue = [] {
    auto* q = new Queue;  // never destroyed: its thread outlives static destruction
    std::thread([q] {
      for (;;) {
        std::unique_lock<std::mutex> lock(q->mu);
        q->ready.wait(lock, [q] { return !q->messages.empty(); });
        const std::string message = std::move(q->messages.front());
        q->messages.pop_front();
        lock.unlock();
        spdlog::warn("{}", message);
        Emit(contract::message::Warning{message});
      }
    }).detach();
    return q;
  }();
  static std::atomic<int64_t> count{0};
  const int64_t n = ++count;
  if (n > 10 && n % 100 != 0) return;
  const std::string message = "the rendezvous store closed a connection from " + peer +
                              ", which " + why + " (" + std::to_string(n) + " so far)";
  std::lock_guard<std::mutex> lock(queue->mu);
  if (queue->messages.size() >= 16) return;
  queue->messages.push_back(message);
  queue->ready.notify_one();
}

}  // namespace

JobStore::JobStore(const rendezvous::JobToken& token,
                   std::unique_ptr<rendezvous::StoreServer> server,
                   std::unique_ptr<rendezvous::StoreClient> client,
                   std::chrono::milliseconds timeout)
    : c10d::Store(timeout), token_(token), server_(std::move(server)), client_(std::move(client)) {}

JobStore::~JobStore() = default;

c10::intrusive_ptr<JobStore> JobStore::Connect(const Placement& placement, bool host) {
  // A program run alone is one process: a token of its own, the same for each of its
  // connections.
  static const std::string own = rendezvous::JobToken::Generate().Hex();
  const bool alone = placement.standalone && placement.job_token.empty();
  Result<rendezvous::JobToken> token =
      rendezvous::JobToken::Parse(alone ? own : placement.job_token);
  if (!token.ok()) throw std::runtime_error("MITRA_JOB_TOKEN: " + token.status().message());
  std::unique_ptr<rendezvous::StoreServer> server;
  if (host) {
    rendezvous::StoreServerOptions options;
    options.on_refused = LogRefused;
    auto started = rendezvous::StoreServer::Start(*token, placement.rdzv_host,
                                                  placement.rdzv_port, options);
    if (!started.ok()) throw std::runtime_error(started.status().message());
    server = std::move(started).value();
  }
  const int port = server ? server->port() : placement.rdzv_port;
  auto client = rendezvous::StoreClient::Connect(*token, placement.rdzv_host, port,
                                                 placement.timeout_s);
  if (!client.ok()) throw std::runtime_error(client.status().message());
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(placement.timeout_s * 1000));
  return c10::make_intrusive<JobStore>(*token, std::move(server),
                                       std::move(client).value(), timeout);
}

namespace {

// One call, its failures thrown: c10d's callers catch exceptions.
Response Call(rendezvous::StoreClient& client, const Request& request, double timeout_s) {
  Result<Response> response = client.Call(request, timeout_s);
  if (!response.ok()) throw std::runtime_error(response.status().message());
  if (response->reply == Reply::kError) {
    throw std::runtime_error(std::string(rendezvous::OpName(request.op)) +
                             " on the rendezvous store failed: " + response->value);
  }
  return std::move(response).value();
}

}  // namespace

void JobStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  Call(*client_, {Op::kSet, 0, {key}, Text(value), {}}, Seconds(timeout_));
}

std::vector<uint8_t> JobStore::compareSet(const std::string& key,
                                          const std::vector<uint8_t>& expected,
                                          const std::vector<uint8_t>& desired) {
  return Bytes(
      Call(*client_, {Op::kCompareSet, 0, {key}, Text(desired), Text(expected)}, Seconds(timeout_))
          .value);
}

std::vector<uint8_t> JobStore::get(const std::string& key) {
  wait({key});
  const Response r = Call(*client_, {Op::kGet, 0, {key}, {}, {}}, Seconds(timeout_));
  if (r.reply != Reply::kValue) throw std::runtime_error("the rendezvous store has no key '" + key + "'");
  return Bytes(r.value);
}

int64_t JobStore::add(const std::string& key, int64_t value) {
  return Call(*client_, {Op::kAdd, value, {key}, {}, {}}, Seconds(timeout_)).number;
}

bool JobStore::deleteKey(const std::string& key) {
  return Call(*client_, {Op::kDelete, 0, {key}, {}, {}}, Seconds(timeout_)).number != 0;
}

bool JobStore::check(const std::vector<std::string>& keys) {
  return Call(*client_, {Op::kCheck, 0, keys, {}, {}}, Seconds(timeout_)).number != 0;
}

int64_t JobStore::getNumKeys() {
  return Call(*client_, {Op::kNumKeys, 0, {}, {}, {}}, Seconds(timeout_)).number;
}

void JobStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void JobStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  // The store answers at the timeout (none for c10d's kNoTimeout, 0); the client allows the
  // answer a little longer to arrive.
  const bool forever = timeout == kNoTimeout;
  const Response r = Call(*client_, {Op::kWait, timeout.count(), keys, {}, {}},
                          forever ? 1e9 : Seconds(timeout) + 5);
  if (r.reply == Reply::kTimedOut) {
    std::string names;
    for (const std::string& k : keys) names += (names.empty() ? "'" : ", '") + k + "'";
    throw std::runtime_error("waited " + SecondsText(Seconds(timeout)) +
                             " s on the rendezvous store for " + names);
  }
}

int64_t JobStore::refused() const { return server_ ? server_->counts().refused : 0; }

rendezvous::Bytes32 JobStore::PairTag(const std::string& nonce, int from, int to) const {
  const std::string ranks = std::to_string(from) + ">" + std::to_string(to);
  return rendezvous::Hmac(token_.key(), {"pair", nonce, ranks});
}

}  // namespace mitra::worker
