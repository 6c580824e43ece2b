// The rendezvous store over real sockets on loopback: c10d's operations, and that it admits
// only holders of the job token and that no one client can stall or exhaust it.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/store_client.h"
#include "rendezvous/store_server.h"
#include "rendezvous/wire.h"
#include "tests/rendezvous/raw_socket.h"

namespace mitra::rendezvous {
namespace {

using testing::ClosedWithin;
using testing::RawConnect;

constexpr char kLoopback[] = "127.0.0.1";

struct Fixture {
  JobToken token = JobToken::Generate();
  std::unique_ptr<StoreServer> server;

  explicit Fixture(StoreServerOptions options = {}) {
    auto started = StoreServer::Start(token, kLoopback, 0, std::move(options));
    EXPECT_TRUE(started.ok()) << started.status().message();
    server = std::move(started).value();
  }
  std::unique_ptr<StoreClient> Client(double timeout_s = 5) {
    auto client = StoreClient::Connect(token, kLoopback, server->port(), timeout_s);
    EXPECT_TRUE(client.ok()) << client.status().message();
    return client.ok() ? std::move(client).value() : nullptr;
  }
};

Response Call(StoreClient& client, Request request) {
  Result<Response> response = client.Call(request, 5);
  EXPECT_TRUE(response.ok()) << response.status().message();
  return response.ok() ? *response : Response{Reply::kError, 0, response.status().message()};
}

// A raw connection that has proven `token` (the handshake done by hand): what a job's own
// process could send.
int ProvenRaw(const JobToken& token, int port) {
  const int fd = RawConnect(port);
  std::string hello(kHelloBytes, '\0');
  EXPECT_EQ(::recv(fd, hello.data(), hello.size(), MSG_WAITALL), static_cast<ssize_t>(kHelloBytes));
  const Bytes32 server_nonce = *ReadHello(hello), client_nonce = RandomBytes32();
  const std::string proof = Proof(token, server_nonce, client_nonce);
  EXPECT_EQ(::send(fd, proof.data(), proof.size(), MSG_NOSIGNAL), static_cast<ssize_t>(proof.size()));
  std::string answer(kAnswerBytes, '\0');
  EXPECT_EQ(::recv(fd, answer.data(), answer.size(), MSG_WAITALL), static_cast<ssize_t>(kAnswerBytes));
  return fd;
}

TEST(RendezvousStore, AnswersEachOperationAsC10dsStoreDoes) {
  Fixture f;
  auto client = f.Client();
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(Call(*client, {Op::kGet, 0, {"a"}, {}, {}}).reply, Reply::kNotFound);
  EXPECT_EQ(Call(*client, {Op::kSet, 0, {"a"}, "1", {}}).reply, Reply::kOk);
  EXPECT_EQ(Call(*client, {Op::kGet, 0, {"a"}, {}, {}}).value, "1");
  EXPECT_EQ(Call(*client, {Op::kAdd, 5, {"n"}, {}, {}}).number, 5);
  EXPECT_EQ(Call(*client, {Op::kAdd, -2, {"n"}, {}, {}}).number, 3);
  EXPECT_EQ(Call(*client, {Op::kGet, 0, {"n"}, {}, {}}).value, "3");
  EXPECT_EQ(Call(*client, {Op::kAdd, 1, {"a"}, {}, {}}).number, 2);
  // compare-set: a missing key is set only when "" was expected; a present one when it matches.
  EXPECT_EQ(Call(*client, {Op::kCompareSet, 0, {"c"}, "new", "x"}).value, "x");
  EXPECT_EQ(Call(*client, {Op::kCompareSet, 0, {"c"}, "new", ""}).value, "new");
  EXPECT_EQ(Call(*client, {Op::kCompareSet, 0, {"c"}, "newer", "x"}).value, "new");
  EXPECT_EQ(Call(*client, {Op::kCompareSet, 0, {"c"}, "newer", "new"}).value, "newer");
  EXPECT_EQ(Call(*client, {Op::kCheck, 0, {"a", "n"}, {}, {}}).number, 1);
  EXPECT_EQ(Call(*client, {Op::kCheck, 0, {"a", "zz"}, {}, {}}).number, 0);
  EXPECT_EQ(Call(*client, {Op::kNumKeys, 0, {}, {}, {}}).number, 3);
  EXPECT_EQ(Call(*client, {Op::kDelete, 0, {"a"}, {}, {}}).number, 1);
  EXPECT_EQ(Call(*client, {Op::kDelete, 0, {"a"}, {}, {}}).number, 0);
  EXPECT_EQ(Call(*client, {Op::kNumKeys, 0, {}, {}, {}}).number, 2);
}

TEST(RendezvousStore, AWaitIsAnsweredWhenAnotherClientSetsItsLastKeyOrAtItsTimeout) {
  Fixture f;
  auto waiter = f.Client(), setter = f.Client();
  ASSERT_NE(waiter, nullptr);
  ASSERT_NE(setter, nullptr);
  std::atomic<bool> answered{false};
  std::thread wait([&] {
    EXPECT_EQ(Call(*waiter, {Op::kWait, 10'000, {"x", "y"}, {}, {}}).reply, Reply::kOk);
    answered = true;
  });
  Call(*setter, {Op::kSet, 0, {"x"}, "1", {}});
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(answered);
  Call(*setter, {Op::kAdd, 1, {"y"}, {}, {}});
  wait.join();
  EXPECT_TRUE(answered);

  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(Call(*waiter, {Op::kWait, 200, {"never"}, {}, {}}).reply, Reply::kTimedOut);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(190));
  // The connection serves on after a timed-out wait.
  EXPECT_EQ(Call(*waiter, {Op::kGet, 0, {"x"}, {}, {}}).value, "1");
}

TEST(RendezvousStore, AClientWithAnotherJobsTokenIsRefusedAndCountedAndTheJobsClientsServeOn) {
  std::vector<std::string> refused;
  StoreServerOptions options;
  options.on_refused = [&](const std::string& peer, const std::string& why) {
    refused.push_back(peer + " " + why);
  };
  Fixture f(options);
  auto ours = f.Client();
  ASSERT_NE(ours, nullptr);
  auto theirs = StoreClient::Connect(JobToken::Generate(), kLoopback, f.server->port(), 5);
  ASSERT_FALSE(theirs.ok());
  EXPECT_EQ(theirs.status().code(), Status::Code::kUnavailable);
  EXPECT_NE(theirs.status().message().find("refused this process's job token"), std::string::npos)
      << theirs.status().message();
  EXPECT_EQ(Call(*ours, {Op::kSet, 0, {"k"}, "v", {}}).reply, Reply::kOk);
  EXPECT_EQ(f.server->counts().refused, 1);
  EXPECT_EQ(f.server->counts().proven, 1);
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_NE(refused[0].find("did not prove the job token"), std::string::npos) << refused[0];
}

TEST(RendezvousStore, AProcessThatTookTheStoresPortIsNotBelievedWithoutTheToken) {
  // It greets like a store, takes the client's proof and answers with bytes of its own.
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  ::inet_pton(AF_INET, kLoopback, &addr.sin_addr);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(listener, 1), 0);
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  std::thread impostor([listener] {
    const int fd = ::accept(listener, nullptr, nullptr);
    const std::string hello = Hello(RandomBytes32());
    ::send(fd, hello.data(), hello.size(), MSG_NOSIGNAL);
    std::string proof(kProofBytes, '\0');
    ::recv(fd, proof.data(), proof.size(), MSG_WAITALL);
    const std::string answer(AsText(RandomBytes32()));
    ::send(fd, answer.data(), answer.size(), MSG_NOSIGNAL);
    ::sleep(1);
    ::close(fd);
  });
  auto client = StoreClient::Connect(JobToken::Generate(), kLoopback, ntohs(addr.sin_port), 5);
  impostor.join();
  ::close(listener);
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), Status::Code::kUnavailable);
  EXPECT_NE(client.status().message().find("could not prove it holds this job's token"),
            std::string::npos)
      << client.status().message();
}

TEST(RendezvousStore, AStalledClientHoldsNoOneUpAndIsDroppedAtItsDeadline) {
  StoreServerOptions options;
  options.handshake_timeout_s = 0.5;
  options.frame_timeout_s = 0.5;
  Fixture f(options);
  // Half a proof, then silence.
  const int stalled = RawConnect(f.server->port());
  ASSERT_GE(stalled, 0);
  ASSERT_EQ(::send(stalled, "mitrardz", 8, 0), 8);
  // A proven client that begins a frame of 100 bytes and sends 10.
  const int half = ProvenRaw(f.token, f.server->port());
  ASSERT_EQ(::send(half, "\0\0\0\x64" "0123456789", 14, MSG_NOSIGNAL), 14);
  const auto start = std::chrono::steady_clock::now();
  auto client = f.Client();
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(Call(*client, {Op::kSet, 0, {"k"}, "v", {}}).reply, Reply::kOk);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(300));
  EXPECT_TRUE(ClosedWithin(stalled, 3));
  EXPECT_TRUE(ClosedWithin(half, 3));
  ::close(stalled);
  ::close(half);
  EXPECT_EQ(f.server->counts().refused, 2);
}

// Before the proof: nothing is read but a proof's bytes, and other bytes are refused at once.
TEST(RendezvousStore, AHeaderClaimingHugeLengthsBeforeTheProofIsRefusedAtOnce) {
  Fixture f;
  auto client = f.Client();
  ASSERT_NE(client, nullptr);
  // Before the proof: more bytes than a proof.
  const int raw = RawConnect(f.server->port());
  ASSERT_GE(raw, 0);
  const std::string huge = std::string("\x7f\xff\xff\xff", 4) + std::string(200, 'k');
  ASSERT_EQ(::send(raw, huge.data(), huge.size(), MSG_NOSIGNAL), static_cast<ssize_t>(huge.size()));
  EXPECT_TRUE(ClosedWithin(raw, 0.5));
  ::close(raw);
  EXPECT_EQ(f.server->counts().refused, 1);
  // Another protocol's request shorter than a proof (c10d TCPStore's: a query type, a key) is
  // refused at once, not at the handshake's deadline.
  const int other = RawConnect(f.server->port());
  const std::string add = std::string("\x02\x1a\0\0\0\0\0\0\0", 9) + "gen-1/checkpoint/50/failed";
  ASSERT_EQ(::send(other, add.data(), add.size(), MSG_NOSIGNAL), static_cast<ssize_t>(add.size()));
  EXPECT_TRUE(ClosedWithin(other, 0.5));
  ::close(other);
  EXPECT_EQ(f.server->counts().refused, 2);
  EXPECT_EQ(Call(*client, {Op::kNumKeys, 0, {}, {}, {}}).number, 0);
}

TEST(RendezvousStore, AProvenClientsFrameOverTheLimitIsRefusedAtItsHeader) {
  Fixture f;
  const int proven = ProvenRaw(f.token, f.server->port());
  ASSERT_EQ(::send(proven, "\x7f\xff\xff\xff" "0123", 8, MSG_NOSIGNAL), 8);
  EXPECT_TRUE(ClosedWithin(proven, 0.5));
  ::close(proven);
  EXPECT_EQ(f.server->counts().refused, 1);
}

// Outsiders from another address open connections as fast as they can while a rank connects:
// each new connection past the cap takes the place of the oldest one of the address holding
// the most, so the flood gives up its own places and the rank's handshake goes through.
TEST(RendezvousStore, AFloodOfConnectionsFromAnotherAddressCannotKeepARankOut) {
  StoreServerOptions options;
  options.max_unproven = 16;
  Fixture f(options);
  std::atomic<bool> flooding{true};
  std::atomic<int> opened{0};
  std::thread flood([&] {
    std::vector<int> fds;
    while (flooding) {
      const int fd = RawConnect(f.server->port(), "127.0.0.2");
      if (fd >= 0) fds.push_back(fd);
      ++opened;
      if (fds.size() > 200) {
        ::close(fds.front());
        fds.erase(fds.begin());
      }
    }
    for (int fd : fds) ::close(fd);
  });
  while (opened < 100) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  for (int i = 0; i < 5; ++i) {
    auto client = f.Client(5);
    ASSERT_NE(client, nullptr);
    EXPECT_EQ(Call(*client, {Op::kSet, 0, {"k"}, "v", {}}).reply, Reply::kOk);
  }
  flooding = false;
  flood.join();
  EXPECT_GE(f.server->counts().refused, 50);
}

TEST(RendezvousStore, ManyIdleConnectionsCannotKeepTheJobsRanksOut) {
  StoreServerOptions options;
  options.max_unproven = 16;
  Fixture f(options);
  std::vector<int> idle;
  for (int i = 0; i < 100; ++i) idle.push_back(RawConnect(f.server->port()));
  auto client = f.Client(2);
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(Call(*client, {Op::kSet, 0, {"k"}, "v", {}}).reply, Reply::kOk);
  for (int fd : idle) ::close(fd);
  EXPECT_GE(f.server->counts().refused, 80);
}

TEST(RendezvousStore, ValuesPastTheCapAreRefusedAndTheStoreServesOn) {
  StoreServerOptions options;
  options.max_store_bytes = 1000;
  Fixture f(options);
  auto client = f.Client();
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(Call(*client, {Op::kSet, 0, {"a"}, std::string(900, 'x'), {}}).reply, Reply::kOk);
  const Response full = Call(*client, {Op::kSet, 0, {"b"}, std::string(200, 'x'), {}});
  EXPECT_EQ(full.reply, Reply::kError);
  EXPECT_NE(full.value.find("full"), std::string::npos);
  // Replacing a value counts its old size out.
  EXPECT_EQ(Call(*client, {Op::kSet, 0, {"a"}, std::string(950, 'y'), {}}).reply, Reply::kOk);
}

TEST(RendezvousStore, ListensOnItsAddressOnlyNotEveryInterface) {
  Fixture f;
  // 127.0.0.2 is this machine too (all of 127/8 is loopback), but not the address it was given.
  EXPECT_EQ(RawConnect(f.server->port(), kLoopback, "127.0.0.2"), -1);
  const int fd = RawConnect(f.server->port(), "127.0.0.2", kLoopback);  // from another address
  EXPECT_GE(fd, 0);
  ::close(fd);
}

TEST(RendezvousStore, AnAddressThatIsNotThisMachinesIsAnErrorNamingIt) {
  auto started = StoreServer::Start(JobToken::Generate(), "192.0.2.1", 0);  // TEST-NET-1
  ASSERT_FALSE(started.ok());
  EXPECT_NE(started.status().message().find("192.0.2.1"), std::string::npos);
  auto everywhere = StoreServer::Start(JobToken::Generate(), "0.0.0.0", 0);
  ASSERT_FALSE(everywhere.ok());
  EXPECT_NE(everywhere.status().message().find("never on every interface"), std::string::npos);
}

}  // namespace
}  // namespace mitra::rendezvous
