#include "run/control_socket.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <chrono>
#include <cstring>
#include <exception>
#include <vector>

#include "common/duration_text.h"
#include "common/file_system.h"

namespace mitra::run {
namespace {

using SteadyClock = std::chrono::steady_clock;

// The most a response may hold; a status with a thousand machines fits easily.
constexpr size_t kMaxResponseBytes = 4 << 20;

std::string RunDirOf(const std::string& socket_path) {
  const size_t slash = socket_path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : socket_path.substr(0, slash);
}

std::string Errno(int error) { return std::strerror(error); }

Status PathTooLong(const std::string& socket_path) {
  return Status::InvalidArgument(
      "the control socket path " + socket_path + " is " + std::to_string(socket_path.size()) +
      " bytes long; Unix sockets allow at most " + std::to_string(MaxSocketPathLength()) +
      "; use a shorter --run-dir (a relative path counts as written)");
}

Status AlreadyRunning(const std::string& socket_path, const std::string& how) {
  const std::string run_dir = RunDirOf(socket_path);
  return Status::InvalidArgument("a manager is already running on " + run_dir + " (" + how +
                                 "); stop it with `mitra stop --run-dir " + run_dir +
                                 "`, or give this run another --run-dir");
}

bool FillAddress(const std::string& socket_path, struct sockaddr_un* address) {
  if (socket_path.size() > MaxSocketPathLength()) return false;
  std::memset(address, 0, sizeof(*address));
  address->sun_family = AF_UNIX;
  std::memcpy(address->sun_path, socket_path.data(), socket_path.size());
  return true;
}

int MillisecondsUntil(SteadyClock::time_point deadline) {
  const auto now = SteadyClock::now();
  if (deadline <= now) return 0;
  return static_cast<int>(
      std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count());
}

SteadyClock::duration Seconds(double s) {
  return std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(s));
}

std::string ErrorResponse(const std::string& message) {
  return JsonObject().SetBool("ok", false).SetString("error", message).ToJson();
}

}  // namespace

std::string ControlSocketPath(const std::string& run_dir) {
  return JoinPath(run_dir, "control.sock");
}

size_t MaxSocketPathLength() { return sizeof(sockaddr_un::sun_path) - 1; }

bool ControlSocketIsLive(const std::string& socket_path) {
  struct sockaddr_un address;
  if (!FillAddress(socket_path, &address)) return false;
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return false;
  const int rc = ::connect(fd, reinterpret_cast<struct sockaddr*>(&address), sizeof(address));
  // EAGAIN: the backlog is full, so someone listens.
  const bool live = rc == 0 || errno == EAGAIN;
  ::close(fd);
  return live;
}

// ---- ControlServer -------------------------------------------------------------------------

struct ControlServer::Client {
  int fd = -1;
  std::string in;
  std::string out;
  size_t written = 0;
  bool responding = false;
  SteadyClock::time_point deadline;
};

ControlServer::ControlServer(std::string socket_path, Handler handler,
                             ControlServerOptions options)
    : socket_path_(std::move(socket_path)),
      handler_(std::move(handler)),
      options_(options) {}

ControlServer::~ControlServer() { Stop(); }

Status ControlServer::Start() {
  if (running_) return Status::Internal("ControlServer::Start called twice for " + socket_path_);
  if (socket_path_.size() > MaxSocketPathLength()) return PathTooLong(socket_path_);
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) return Status::IoError("cannot serve " + socket_path_ + ": " + Errno(errno));
  if (Status s = Bind(); !s.ok()) {
    ::close(wake_fd_);
    wake_fd_ = -1;
    if (listen_fd_ >= 0) ::close(listen_fd_);
    listen_fd_ = -1;
    if (lock_fd_ >= 0) ::close(lock_fd_);
    lock_fd_ = -1;
    return s;
  }
  running_ = true;
  thread_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

Status ControlServer::Bind() {
  // The lock comes first: whoever holds it owns the socket path, so two managers starting at
  // once cannot both decide the other's fresh socket is stale.
  const std::string lock_path = socket_path_ + ".lock";
  lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd_ < 0) {
    return Status::IoError("cannot create " + lock_path + ": " + Errno(errno) +
                           " (does the run directory exist and is it writable?)");
  }
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) return AlreadyRunning(socket_path_, "it holds " + lock_path);
    // No locks on this file system (ENOLCK): the liveness check below still protects.
    ::close(lock_fd_);
    lock_fd_ = -1;
  }

  struct stat st {};
  if (::lstat(socket_path_.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return Status::InvalidArgument(socket_path_ +
                                     " exists and is not a socket; remove it and start again");
    }
    if (ControlSocketIsLive(socket_path_)) {
      return AlreadyRunning(socket_path_, "it answers on " + socket_path_);
    }
    ::unlink(socket_path_.c_str());  // left by a manager that died
  }

  struct sockaddr_un address;
  FillAddress(socket_path_, &address);
  listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) return Status::IoError("cannot create a Unix socket: " + Errno(errno));
  // On Linux the socket file takes the mode of the socket's inode (less the umask), so it is
  // 0600 from its creation: there is no moment where another user could connect. The process
  // umask is left alone (other threads may be creating files).
  if (::fchmod(listen_fd_, 0600) != 0) {
    return Status::IoError("cannot restrict " + socket_path_ + ": " + Errno(errno));
  }
  if (::bind(listen_fd_, reinterpret_cast<struct sockaddr*>(&address), sizeof(address)) != 0) {
    if (errno == EADDRINUSE) return AlreadyRunning(socket_path_, "it just created " + socket_path_);
    return Status::IoError("cannot create " + socket_path_ + ": " + Errno(errno));
  }
  // Belt and braces for kernels that ignore the inode's mode.
  ::chmod(socket_path_.c_str(), 0600);
  if (::lstat(socket_path_.c_str(), &st) == 0) socket_inode_ = static_cast<uint64_t>(st.st_ino);
  if (::listen(listen_fd_, 64) != 0) {
    return Status::IoError("cannot listen on " + socket_path_ + ": " + Errno(errno));
  }
  return Status::Ok();
}

void ControlServer::Stop() {
  if (!running_) return;
  running_ = false;
  const uint64_t one = 1;
  while (::write(wake_fd_, &one, sizeof(one)) < 0 && errno == EINTR) {
  }
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
  ::close(wake_fd_);
  listen_fd_ = wake_fd_ = -1;
  // Remove the socket before releasing the lock, and only if it is still ours.
  struct stat st {};
  if (::lstat(socket_path_.c_str(), &st) == 0 &&
      static_cast<uint64_t>(st.st_ino) == socket_inode_) {
    ::unlink(socket_path_.c_str());
  }
  if (lock_fd_ >= 0) ::close(lock_fd_);
  lock_fd_ = -1;
}

std::string ControlServer::Answer(const std::string& request_line) const {
  Result<JsonObject> request = JsonObject::Parse(request_line);
  if (!request.ok()) {
    return ErrorResponse("bad request (expected one JSON object such as "
                         "{\"command\":\"status\"}): " + request.status().message());
  }
  try {
    return handler_(*request);
  } catch (const std::exception& e) {
    return ErrorResponse(std::string("the manager failed to answer: ") + e.what());
  } catch (...) {
    return ErrorResponse("the manager failed to answer");
  }
}

void ControlServer::Respond(Client& client, std::string response) const {
  std::replace(response.begin(), response.end(), '\n', ' ');
  client.out = response + "\n";
  client.responding = true;
  client.deadline = SteadyClock::now() + Seconds(options_.client_timeout_s);
}

bool ControlServer::ReadRequest(Client& client) const {
  char buffer[4096];
  while (true) {
    const ssize_t n = ::recv(client.fd, buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;  // wait for more
    if (n <= 0) {
      // The client closed its side: a request without its final '\n' still counts.
      if (n < 0 || client.in.empty()) return false;
      Respond(client, Answer(client.in));
      return true;
    }
    client.in.append(buffer, static_cast<size_t>(n));
    const size_t newline = client.in.find('\n');
    if (newline != std::string::npos && newline <= options_.max_request_bytes) {
      Respond(client, Answer(client.in.substr(0, newline)));
      return true;
    }
    if (client.in.size() > options_.max_request_bytes) {
      Respond(client, ErrorResponse("request longer than " +
                                    std::to_string(options_.max_request_bytes) + " bytes"));
      return true;
    }
  }
}

bool ControlServer::Serve(Client& client) const {
  if (!client.responding && !ReadRequest(client)) return false;
  if (!client.responding) return true;  // the request is not complete yet
  while (client.written < client.out.size()) {
    const ssize_t n = ::send(client.fd, client.out.data() + client.written,
                             client.out.size() - client.written, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (n < 0) return false;
    client.written += static_cast<size_t>(n);
  }
  return false;  // answered
}

namespace {

// Whether `fd` has bytes (or its end) waiting to be read, without taking them.
bool HasInput(int fd) {
  char byte;
  const ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
}

}  // namespace

std::vector<ControlServer::Client>::iterator ControlServer::MakeRoom(
    std::vector<Client>& clients) const {
  if (static_cast<int>(clients.size()) < options_.max_clients) return clients.end();
  // In order of arrival: the first is the oldest.
  return std::find_if(clients.begin(), clients.end(), [](const Client& client) {
    return !client.responding && !HasInput(client.fd);
  });
}

bool ControlServer::HasRoom(std::vector<Client>& clients) const {
  return static_cast<int>(clients.size()) < options_.max_clients ||
         MakeRoom(clients) != clients.end();
}

void ControlServer::Accept(std::vector<Client>& clients) const {
  while (HasRoom(clients)) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;  // EAGAIN: no more; anything else: the client gave up
    const auto stalled = MakeRoom(clients);
    if (stalled != clients.end()) {
      ::close(stalled->fd);
      clients.erase(stalled);
    }
    Client client;
    client.fd = fd;
    client.deadline = SteadyClock::now() + Seconds(options_.client_timeout_s);
    clients.push_back(std::move(client));
  }
}

void ControlServer::Loop() {
  std::vector<Client> clients;
  while (true) {
    // Poll the wake pipe, the listening socket while there is room, and every client.
    std::vector<struct pollfd> fds;
    fds.push_back({wake_fd_, POLLIN, 0});
    const bool accepting = HasRoom(clients);
    fds.push_back({accepting ? listen_fd_ : -1, POLLIN, 0});
    int timeout_ms = -1;
    for (const Client& client : clients) {
      fds.push_back({client.fd, static_cast<short>(client.responding ? POLLOUT : POLLIN), 0});
      const int ms = MillisecondsUntil(client.deadline);
      timeout_ms = timeout_ms < 0 ? ms : std::min(timeout_ms, ms);
    }
    if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) break;
    if (fds[0].revents != 0) break;  // Stop()

    // Serve the ready clients; close those answered, gone or too slow.
    std::vector<Client> still;
    for (size_t i = 0; i < clients.size(); ++i) {
      bool keep = fds[i + 2].revents == 0 || Serve(clients[i]);
      if (keep && SteadyClock::now() >= clients[i].deadline) keep = false;
      if (keep) {
        still.push_back(std::move(clients[i]));
      } else {
        ::close(clients[i].fd);
      }
    }
    clients = std::move(still);
    if (accepting && (fds[1].revents & POLLIN)) Accept(clients);
  }
  for (const Client& client : clients) ::close(client.fd);
}

// ---- client --------------------------------------------------------------------------------

Result<JsonObject> SendControlRequest(const std::string& socket_path, const JsonObject& request,
                                      double timeout_s) {
  const std::string run_dir = RunDirOf(socket_path);
  struct sockaddr_un address;
  if (!FillAddress(socket_path, &address)) return PathTooLong(socket_path);
  const SteadyClock::time_point deadline = SteadyClock::now() + Seconds(timeout_s);
  auto timed_out = [&](const std::string& what) {
    return Status::Timeout("the manager on " + run_dir + " did not " + what + " within " +
                           SecondsText(timeout_s) + " s; it may be busy or hung (its pid is in " + run_dir +
                           "/state.json)");
  };

  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return Status::IoError("cannot create a Unix socket: " + Errno(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};

  // A Unix socket connects at once or fails; EAGAIN means the backlog is full, so try again
  // until the deadline.
  while (::connect(fd, reinterpret_cast<struct sockaddr*>(&address), sizeof(address)) != 0) {
    const int error = errno;
    if (error == EINTR) continue;
    if (error == EAGAIN) {
      if (MillisecondsUntil(deadline) == 0) return timed_out("accept the connection");
      ::poll(nullptr, 0, 10);
      continue;
    }
    if (error == ENOENT || error == ECONNREFUSED || error == ENOTDIR) {
      return Status::NotFound("no manager is running on " + run_dir + " (" + socket_path +
                              ": " + Errno(error) + "); start one with `mitra run --run-dir " +
                              run_dir + " ...`");
    }
    if (error == EACCES || error == EPERM) {
      return Status::IoError("permission denied on " + socket_path +
                             ": the manager of this run directory runs as another user");
    }
    return Status::IoError("cannot connect to " + socket_path + ": " + Errno(error));
  }

  const std::string line = request.ToJson() + "\n";
  size_t sent = 0;
  while (sent < line.size()) {
    const ssize_t n = ::send(fd, line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
    if (n >= 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return Status::IoError("the manager on " + run_dir + " closed the connection: " +
                             Errno(errno));
    }
    struct pollfd p = {fd, POLLOUT, 0};
    if (::poll(&p, 1, MillisecondsUntil(deadline)) == 0) return timed_out("take the request");
  }

  std::string response;
  while (response.find('\n') == std::string::npos) {
    struct pollfd p = {fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, MillisecondsUntil(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) return timed_out("answer");
    char buffer[4096];
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) return Status::IoError("reading from " + socket_path + ": " + Errno(errno));
    if (n == 0) break;
    response.append(buffer, static_cast<size_t>(n));
    if (response.size() > kMaxResponseBytes) {
      return Status::IoError("the manager on " + run_dir + " sent an overlong response");
    }
  }
  if (response.empty()) {
    return Status::IoError("the manager on " + run_dir +
                           " closed the connection without answering (is it exiting?)");
  }
  Result<JsonObject> parsed = JsonObject::Parse(response.substr(0, response.find('\n')));
  if (!parsed.ok()) {
    return Status::IoError("malformed response from the manager on " + run_dir + ": " +
                           parsed.status().message());
  }
  return parsed;
}

}  // namespace mitra::run
