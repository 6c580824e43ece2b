#include "rendezvous/store_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "common/clock.h"
#include "rendezvous/store_table.h"
#include "rendezvous/wire.h"

namespace mitra::rendezvous {
namespace {

using Clock = std::chrono::steady_clock;

// Answers a connection may leave unread before it is closed.
constexpr size_t kMaxUnread = 4 * kMaxBody;

std::string PeerOf(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "an unknown peer";
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &addr.sin_addr, text, sizeof(text));
  return std::string(text) + ":" + std::to_string(ntohs(addr.sin_port));
}

// Whether `received` (a proof's first bytes) can still be a proof: it begins as one does.
bool StartsLikeAProof(std::string_view received) {
  std::string header(kMagic);
  header += static_cast<char>(kVersion);
  const size_t n = std::min(received.size(), header.size());
  return received.substr(0, n) == std::string_view(header).substr(0, n);
}

}  // namespace

Result<std::string> ResolveIpv4(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int error = ::getaddrinfo(host.c_str(), nullptr, &hints, &found); error != 0) {
    return Status::InvalidArgument("cannot resolve '" + host + "' to an IPv4 address: " +
                                   ::gai_strerror(error));
  }
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr, text,
              sizeof(text));
  ::freeaddrinfo(found);
  return std::string(text);
}

// The server's state, touched only by its thread.
class StoreServer::Loop {
 public:
  Loop(const JobToken& token, StoreServerOptions options, std::atomic<int64_t>& proven,
       std::atomic<int64_t>& refused)
      : token_(token), options_(std::move(options)), proven_(proven), refused_(refused),
        table_(options_.max_store_bytes) {}
  ~Loop() {
    for (auto& [id, c] : connections_) ::close(c.fd);
  }

  // Serves until `wake_fd` is written.
  void Run(int listen_fd, int wake_fd);

 private:
  struct Connection {
    int fd = -1;
    std::string peer;
    Bytes32 server_nonce{};
    std::string handshake;          // proof bytes received so far
    std::optional<Channel> channel;  // once proven
    std::string out;                 // bytes still to send
    Clock::time_point deadline = Clock::time_point::max();  // proof, or a frame begun
    std::string source;              // the peer's address without its port
    bool waiting = false;            // a wait of its own is held (StoreTable)
    bool gone = false;               // a write failed: the peer is gone; closed quietly
    bool unread = false;             // it left too many answers unread: refused
  };

  void Accept(int listen_fd);
  // Makes room for one more connection still to prove the token, from `source`.
  void MakeRoomForOneUnproven(const std::string& source);
  // Reads what the connection sent and acts on it; false when it is to be closed.
  bool Read(uint64_t id, Connection& c);
  bool Prove(Connection& c);
  bool Serve(uint64_t id, Connection& c);
  bool Write(Connection& c);
  void Refuse(uint64_t id, const std::string& why);
  void Close(uint64_t id);
  // Sends each answer to its connection (closed ones are skipped).
  void Send(const std::vector<StoreTable::Answer>& answers);
  void Respond(uint64_t id, const Response& response);
  void ExpireDeadlines();
  // Closes the connections a write found gone (quietly) or that did not read (refused).
  void CloseDead();
  int PollTimeoutMs() const;

  JobToken token_;
  StoreServerOptions options_;
  std::atomic<int64_t>& proven_;
  std::atomic<int64_t>& refused_;
  std::map<uint64_t, Connection> connections_;
  std::set<uint64_t> unproven_;  // connections still to prove the token, oldest first
  Clock::time_point accept_after_ = Clock::time_point::min();  // out of descriptors: a pause
  uint64_t next_id_ = 1;
  StoreTable table_;  // the keys, values and waits; a connection's id is its client id
};

void StoreServer::Loop::Run(int listen_fd, int wake_fd) {
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;
  for (;;) {
    fds.clear();
    ids.clear();
    const bool accepting = connections_.size() < options_.max_connections &&
                           Clock::now() >= accept_after_;
    fds.push_back({wake_fd, POLLIN, 0});
    fds.push_back({accepting ? listen_fd : -1, POLLIN, 0});
    for (const auto& [id, c] : connections_) {
      const bool reading = !c.waiting;  // a waiting client sends nothing until answered
      fds.push_back({c.fd, static_cast<short>((reading ? POLLIN : 0) | (c.out.empty() ? 0 : POLLOUT)), 0});
      ids.push_back(id);
    }
    if (::poll(fds.data(), fds.size(), PollTimeoutMs()) < 0 && errno != EINTR) return;
    if (fds[0].revents != 0) return;
    for (size_t i = 0; i < ids.size(); ++i) {
      const short events = fds[i + 2].revents;
      if (events == 0) continue;
      auto it = connections_.find(ids[i]);
      if (it == connections_.end()) continue;  // closed while handling another
      Connection& c = it->second;
      bool keep = true;
      if (events & (POLLIN | POLLHUP | POLLERR)) keep = Read(ids[i], c);
      if (keep && (events & POLLOUT)) keep = Write(c);
      if (!keep) Close(ids[i]);
    }
    if (fds[1].revents & POLLIN) Accept(listen_fd);
    ExpireDeadlines();
    CloseDead();
  }
}

void StoreServer::Loop::Accept(int listen_fd) {
  for (;;) {
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      // EAGAIN: none left. Out of descriptors (EMFILE, ENFILE) or memory: the connection
      // waits in the backlog, and accepting pauses rather than spinning on it.
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        accept_after_ = SteadyAfter(0.1);
      }
      return;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    Connection c;
    c.fd = fd;
    c.peer = PeerOf(fd);
    c.source = c.peer.substr(0, c.peer.rfind(':'));
    MakeRoomForOneUnproven(c.source);
    c.server_nonce = RandomBytes32();
    c.out = Hello(c.server_nonce);
    c.deadline = SteadyAfter(options_.handshake_timeout_s);
    unproven_.insert(next_id_);
    connections_.emplace(next_id_++, std::move(c));
    if (connections_.size() >= options_.max_connections) return;
  }
}

void StoreServer::Loop::MakeRoomForOneUnproven(const std::string& source) {
  if (unproven_.size() < options_.max_unproven) return;
  // The oldest connection of the address that holds the most places (the newcomer's
  // counted too): a flood from one address gives up its own places, not a rank's. Ids grow
  // with acceptance, so each address's first is its oldest.
  std::map<std::string, std::pair<size_t, uint64_t>> by_source;  // count, oldest id
  by_source[source].first = 1;
  for (uint64_t id : unproven_) {
    auto& [count, oldest] = by_source[connections_.at(id).source];
    if (count++ == 0 || oldest == 0) oldest = id;
  }
  const auto most = std::max_element(by_source.begin(), by_source.end(), [](const auto& a,
                                                                           const auto& b) {
    return a.second.first < b.second.first;
  });
  const uint64_t evicted = most->second.second != 0 ? most->second.second : *unproven_.begin();
  Refuse(evicted, "had not proven the job token when " + std::to_string(unproven_.size()) +
                      " connections were waiting to");
}

bool StoreServer::Loop::Read(uint64_t id, Connection& c) {
  char buffer[64 * 1024];
  for (;;) {
    const ssize_t n = ::recv(c.fd, buffer, sizeof(buffer), 0);
    if (n == 0) {
      if (!c.channel) Refuse(id, "closed the connection before proving the job token");
      return false;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      return false;
    }
    const std::string_view bytes(buffer, static_cast<size_t>(n));
    if (!c.channel) {
      if (c.handshake.size() + bytes.size() > kProofBytes) {
        Refuse(id, "sent more than a proof of the job token before being admitted");
        return false;
      }
      c.handshake.append(bytes);
      if (!StartsLikeAProof(c.handshake)) {
        Refuse(id, "is not a mitra rendezvous client (another protocol, or another version)");
        return false;
      }
      if (c.handshake.size() == kProofBytes && !Prove(c)) {
        Refuse(id, "did not prove the job token");
        return false;
      }
      if (c.channel) {
        ++proven_;
        unproven_.erase(id);
      }
      continue;
    }
    c.channel->Feed(bytes);
    if (!Serve(id, c) || c.gone || c.unread) return false;
    if (c.waiting) return true;  // the rest is read once the wait is answered
  }
}

bool StoreServer::Loop::Prove(Connection& c) {
  Result<Bytes32> client_nonce = CheckProof(token_, c.server_nonce, c.handshake);
  if (!client_nonce.ok()) return false;
  c.out += Answer(token_, c.server_nonce, *client_nonce);
  c.channel.emplace(token_, c.server_nonce, *client_nonce, Channel::Side::kServer);
  c.handshake.clear();
  c.deadline = Clock::time_point::max();
  return true;
}

bool StoreServer::Loop::Serve(uint64_t id, Connection& c) {
  bool served = false;  // a whole frame was taken
  while (!c.waiting) {
    std::optional<Result<std::string>> body = c.channel->Next();
    if (!body) break;
    if (!body->ok()) {
      Refuse(id, "sent " + body->status().message());
      return false;
    }
    served = true;
    Result<Request> request = DecodeRequest(**body);
    if (!request.ok()) {
      Respond(id, {Reply::kError, 0, "a malformed request: " + request.status().message()});
      continue;
    }
    // A wait's number is its time limit in ms (<= 0: none); a year stands for longer ones.
    const bool timed = request->op == Op::kWait && request->number > 0;
    const Clock::time_point wait_deadline =
        timed ? SteadyAfter(std::min<double>(static_cast<double>(request->number) / 1000.0, 3.2e7))
              : Clock::time_point::max();
    const std::vector<StoreTable::Answer> answers = table_.Handle(id, *request, wait_deadline);
    c.waiting = table_.Waiting(id);
    Send(answers);
  }
  // A frame begun must end in time: the clock starts when a frame is begun after the last
  // whole one, and stops when nothing is left over.
  if (c.channel->buffered() == 0) {
    c.deadline = Clock::time_point::max();
  } else if (c.deadline == Clock::time_point::max() || served) {
    c.deadline = SteadyAfter(options_.frame_timeout_s);
  }
  return true;
}

void StoreServer::Loop::Send(const std::vector<StoreTable::Answer>& answers) {
  for (const StoreTable::Answer& a : answers) {
    const auto it = connections_.find(a.client);
    if (it == connections_.end()) continue;
    it->second.waiting = false;  // an answer ends its wait, if it had one
    Respond(a.client, a.response);
  }
}

void StoreServer::Loop::Respond(uint64_t id, const Response& response) {
  Connection& c = connections_.at(id);
  c.out += c.channel->Seal(Encode(response));
  // Sent now when it fits the socket; the rest when poll says it may. A client that asks
  // and does not read its answers is closed once they pile up.
  if (!Write(c)) c.gone = true;
  if (c.out.size() > kMaxUnread) c.unread = true;
}

void StoreServer::Loop::CloseDead() {
  std::vector<uint64_t> gone, unread;
  for (const auto& [id, c] : connections_) {
    if (c.unread) {
      unread.push_back(id);
    } else if (c.gone) {
      gone.push_back(id);
    }
  }
  for (uint64_t id : gone) Close(id);  // a rank that died, say: no outsider
  for (uint64_t id : unread) Refuse(id, "left more than " + std::to_string(kMaxUnread) +
                                            " bytes of answers unread");
}

bool StoreServer::Loop::Write(Connection& c) {
  while (!c.out.empty()) {
    const ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK;
    c.out.erase(0, static_cast<size_t>(n));
  }
  return true;
}

void StoreServer::Loop::Refuse(uint64_t id, const std::string& why) {
  auto it = connections_.find(id);
  if (it == connections_.end()) return;
  ++refused_;
  if (options_.on_refused) options_.on_refused(it->second.peer, why);
  Close(id);
}

void StoreServer::Loop::Close(uint64_t id) {
  auto it = connections_.find(id);
  if (it == connections_.end()) return;
  ::close(it->second.fd);
  connections_.erase(it);
  unproven_.erase(id);
  table_.Forget(id);
}

void StoreServer::Loop::ExpireDeadlines() {
  const Clock::time_point now = Clock::now();
  std::vector<uint64_t> late;
  for (const auto& [id, c] : connections_) {
    if (c.deadline <= now) late.push_back(id);
  }
  for (uint64_t id : late) {
    const bool proven = connections_.at(id).channel.has_value();
    Refuse(id, proven ? "began a frame and did not finish it in time"
                      : "did not prove the job token in time");
  }
  Send(table_.ExpireWaits(now));
}

int StoreServer::Loop::PollTimeoutMs() const {
  Clock::time_point next = Clock::time_point::max();
  for (const auto& [id, c] : connections_) next = std::min(next, c.deadline);
  next = std::min(next, table_.NextDeadline());
  if (next == Clock::time_point::max()) return -1;
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(ms + 1, 0, 60'000));
}

StoreServer::StoreServer(int listen_fd, int wake_fd, int port, std::unique_ptr<Loop> loop)
    : listen_fd_(listen_fd), wake_fd_(wake_fd), port_(port), loop_(std::move(loop)) {}

Result<std::unique_ptr<StoreServer>> StoreServer::Start(const JobToken& token,
                                                        const std::string& address, int port,
                                                        StoreServerOptions options) {
  Result<std::string> ip = ResolveIpv4(address);
  if (!ip.ok()) return ip.status();
  if (*ip == "0.0.0.0") {
    return Status::InvalidArgument("the rendezvous store listens on one address of this "
                                   "machine, never on every interface ('" + address + "')");
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, ip->c_str(), &addr.sin_addr);
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return Status::IoError(std::string("cannot create a socket: ") + std::strerror(errno));
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(fd, SOMAXCONN) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int error = errno;
    ::close(fd);
    return Status::IoError("the rendezvous store cannot listen on " + *ip + ":" +
                           std::to_string(port) + ": " + std::strerror(error));
  }
  const int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    ::close(fd);
    return Status::IoError(std::string("cannot create an eventfd: ") + std::strerror(errno));
  }
  std::unique_ptr<StoreServer> server(new StoreServer(fd, wake, ntohs(addr.sin_port), nullptr));
  server->loop_ = std::make_unique<Loop>(token, std::move(options), server->proven_,
                                         server->refused_);
  server->thread_ = std::thread([s = server.get()] { s->loop_->Run(s->listen_fd_, s->wake_fd_); });
  return server;
}

StoreServer::~StoreServer() {
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  loop_.reset();
  ::close(listen_fd_);
  ::close(wake_fd_);
}

}  // namespace mitra::rendezvous
