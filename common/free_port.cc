#include "common/free_port.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

namespace mitra {

Result<int> PickFreeTcpPort(const std::string& ipv4_address) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  if (::inet_pton(AF_INET, ipv4_address.c_str(), &addr.sin_addr) != 1) {
    return Status::InvalidArgument("'" + ipv4_address + "' is not an IPv4 address");
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return Status::IoError(std::string("cannot create a socket: ") + std::strerror(errno));
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int error = errno;
    ::close(fd);
    return Status::IoError("cannot find a free TCP port on " + ipv4_address + ": " +
                           std::strerror(error));
  }
  ::close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

Result<int> ConnectWhenListening(const std::string& host, int port, double timeout_s) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int error = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
      error != 0) {
    return Status::InvalidArgument("cannot resolve '" + host + "': " + ::gai_strerror(error));
  }
  const std::unique_ptr<addrinfo, void (*)(addrinfo*)> addresses(found, ::freeaddrinfo);
  constexpr auto kRetry = std::chrono::milliseconds(5);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_s));
  for (;;) {
    for (const addrinfo* a = addresses.get(); a != nullptr; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) return fd;
      ::close(fd);
    }
    if (std::chrono::steady_clock::now() + kRetry > deadline) {
      return Status::Timeout("nothing listened on " + host + ":" + std::to_string(port) +
                             " within " + std::to_string(timeout_s) + " s");
    }
    std::this_thread::sleep_for(kRetry);
  }
}

}  // namespace mitra
