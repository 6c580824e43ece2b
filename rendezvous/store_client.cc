#include "rendezvous/store_client.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/clock.h"
#include "common/duration_text.h"
#include "common/free_port.h"

namespace mitra::rendezvous {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kClosedBeforeHello[] = "the store closed the connection before greeting it";

// Waits until `fd` has `events` or `deadline` passes (true: it has them). Polls in pieces of
// at most an hour, so that any deadline, however far, is kept.
bool PollUntil(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (ms <= 0) return false;
    pollfd p{fd, events, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(ms, 3'600'000)));
    if (ready > 0) return true;
    if (ready < 0 && errno != EINTR) return false;
  }
}

// Sends every byte before `deadline`; false when the peer is gone or time ran out.
bool SendBefore(int fd, std::string_view bytes, Clock::time_point deadline) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      bytes.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return false;
    if (!PollUntil(fd, POLLOUT, deadline)) return false;
  }
  return true;
}

// Appends what arrives to `into` until it holds `size` bytes. 1: done; 0: the peer closed;
// -1: the deadline passed or the socket failed.
int ReceiveBefore(int fd, std::string& into, size_t size, Clock::time_point deadline) {
  char buffer[64 * 1024];
  while (into.size() < size) {
    if (!PollUntil(fd, POLLIN, deadline)) return -1;
    const ssize_t n = ::recv(fd, buffer, std::min(sizeof(buffer), size - into.size()), 0);
    if (n == 0) return 0;
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) return -1;
    into.append(buffer, static_cast<size_t>(n));
  }
  return 1;
}

}  // namespace

StoreClient::StoreClient(int fd, std::string address, Channel channel)
    : fd_(fd), address_(std::move(address)), channel_(std::move(channel)) {}

StoreClient::~StoreClient() { ::close(fd_); }

Result<std::unique_ptr<StoreClient>> StoreClient::Connect(const JobToken& token,
                                                          const std::string& host, int port,
                                                          double timeout_s) {
  const Clock::time_point deadline = SteadyAfter(timeout_s);
  for (;;) {
    Result<std::unique_ptr<StoreClient>> client = TryConnect(token, host, port, deadline);
    // Closed before its greeting: the store gave this connection's place to a newer one (many
    // connections at once, an outsider's flood among them). Another try, while time is left.
    if (client.ok() || client.status().message() != kClosedBeforeHello ||
        Clock::now() + std::chrono::milliseconds(5) > deadline) {
      if (!client.ok() && client.status().message() == kClosedBeforeHello) {
        return Status::Unavailable("the rendezvous store at " + host + ":" + std::to_string(port) +
                                   " closed every connection before greeting it, for " +
                                   SecondsText(timeout_s) + " s");
      }
      return client;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

Result<std::unique_ptr<StoreClient>> StoreClient::TryConnect(const JobToken& token,
                                                             const std::string& host, int port,
                                                             Clock::time_point deadline) {
  const std::string address = host + ":" + std::to_string(port);
  const double timeout_s =
      std::max(0.0, std::chrono::duration<double>(deadline - Clock::now()).count());
  const std::string within = " within " + SecondsText(timeout_s) + " s";
  Result<int> connected = ConnectWhenListening(host, port, timeout_s);
  if (!connected.ok()) {
    if (connected.status().code() != Status::Code::kTimeout) return connected.status();
    return Status::Timeout("the rendezvous store at " + address + " did not listen" + within);
  }
  const int fd = *connected;
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  auto fail = [&](Status status) {
    ::close(fd);
    return status;
  };
  std::string hello;
  const int got_hello = ReceiveBefore(fd, hello, kHelloBytes, deadline);
  if (got_hello < 0) return fail(Status::Timeout("the rendezvous store at " + address + " did not greet" + within));
  if (got_hello == 0) return fail(Status::Unavailable(kClosedBeforeHello));
  Result<Bytes32> server_nonce = ReadHello(hello);
  if (!server_nonce.ok()) {
    return fail(Status::Unavailable("what listens at " + address +
                                    " is not this job's rendezvous store: " +
                                    server_nonce.status().message()));
  }
  const Bytes32 client_nonce = RandomBytes32();
  std::string answer;
  if (!SendBefore(fd, Proof(token, *server_nonce, client_nonce), deadline) ||
      ReceiveBefore(fd, answer, kAnswerBytes, deadline) == 0) {
    return fail(Status::Unavailable(
        "the rendezvous store at " + address +
        " refused this process's job token: it serves another job, or the ranks were given "
        "different tokens (MITRA_JOB_TOKEN; mitra run gives every rank the same)"));
  }
  if (answer.size() < kAnswerBytes) {
    return fail(Status::Timeout("the rendezvous store at " + address + " did not answer" + within));
  }
  if (!CheckAnswer(token, *server_nonce, client_nonce, answer)) {
    return fail(Status::Unavailable("what listens at " + address +
                                    " could not prove it holds this job's token: it is not "
                                    "this job's rendezvous store"));
  }
  return std::unique_ptr<StoreClient>(new StoreClient(
      fd, address, Channel(token, *server_nonce, client_nonce, Channel::Side::kClient)));
}

Result<Response> StoreClient::Call(const Request& request, double timeout_s) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (broken_) return *broken_;
  const std::string body = Encode(request);
  if (body.size() > kMaxBody) {
    return Status::InvalidArgument(std::string(OpName(request.op)) + " of " +
                                   std::to_string(body.size()) +
                                   " bytes: the rendezvous store takes requests of at most " +
                                   std::to_string(kMaxBody));
  }
  const Clock::time_point deadline = SteadyAfter(timeout_s);
  auto broken = [&](Status status) {
    broken_ = status;
    ::shutdown(fd_, SHUT_RDWR);
    return status;
  };
  const std::string what = std::string(OpName(request.op)) + " on the rendezvous store at " + address_;
  if (!SendBefore(fd_, channel_.Seal(body), deadline)) {
    return broken(Status::Unavailable(what + " failed: the connection closed"));
  }
  std::string bytes;
  for (;;) {
    if (std::optional<Result<std::string>> body = channel_.Next()) {
      if (!body->ok()) return broken(Status::Unavailable(what + ": " + body->status().message()));
      Result<Response> response = DecodeResponse(**body);
      if (!response.ok()) return broken(Status::Unavailable(what + ": " + response.status().message()));
      return response;
    }
    bytes.clear();
    const int got = ReceiveBefore(fd_, bytes, 1, deadline);
    if (got == 0) return broken(Status::Unavailable(what + " failed: the store closed the connection"));
    if (got < 0) {
      return broken(Status::Timeout(what + " had no answer within " + SecondsText(timeout_s) + " s"));
    }
    // Take whatever else has arrived too.
    char more[64 * 1024];
    const ssize_t n = ::recv(fd_, more, sizeof(more), MSG_DONTWAIT);
    if (n > 0) bytes.append(more, static_cast<size_t>(n));
    channel_.Feed(bytes);
  }
}

}  // namespace mitra::rendezvous
