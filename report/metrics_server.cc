#include "report/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <prometheus/exposer.h>
#include <prometheus/registry.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>

namespace mitra::report {
namespace {

constexpr int kThreads = 4;
constexpr int kRequestTimeoutMs = 2000;

// The errno of listening on `address`:`port` as civetweb does (SO_REUSEADDR), 0 when it can be
// done now. civetweb's own exception says only that it could not start.
int ListenErrno(const in_addr& address, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in where{};
  where.sin_family = AF_INET;
  where.sin_port = htons(static_cast<uint16_t>(port));
  where.sin_addr = address;
  int error = 0;
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&where), sizeof(where)) != 0 ||
      ::listen(fd, 1) != 0) {
    error = errno;
  }
  ::close(fd);
  return error;
}

}  // namespace

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& address, int port,
                                                            const RunMetrics& metrics) {
  in_addr parsed{};
  if (::inet_pton(AF_INET, address.c_str(), &parsed) != 1) {
    // Debian's civetweb is built without IPv6.
    return Status::InvalidArgument("--metrics-address '" + address +
                                   "' is not an IPv4 address; give one of this machine's, e.g. "
                                   "127.0.0.1 (the default) or 0.0.0.0 for every interface");
  }
  const std::string where = address + ":" + std::to_string(port);
  const std::string flag = "--metrics-port " + std::to_string(port) + ": ";
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    // Bounded, so that no client holds the others up: a client that sends part of a request
    // and waits holds one of the threads for at most request_timeout_ms (civetweb's default
    // is 30 s, for which a single thread used to hold every scrape), and the others answer.
    exposer = std::make_unique<prometheus::Exposer>(std::vector<std::string>{
        "listening_ports", where, "num_threads", std::to_string(kThreads), "request_timeout_ms",
        std::to_string(kRequestTimeoutMs)});
  } catch (const std::exception& e) {
    const int error = ListenErrno(parsed, port);
    switch (error) {
      case EADDRINUSE:
        return Status::InvalidArgument(
            flag + where +
            " is taken by another program (`ss -ltnp` shows which): pick a free "
            "port with --metrics-port");
      case EACCES:
        return Status::InvalidArgument(flag +
                                       "ports below 1024 need privileges: pick a port "
                                       "from 1024 up with --metrics-port");
      case EADDRNOTAVAIL:
        return Status::InvalidArgument("--metrics-address " + address +
                                       " is not an address of this machine: give one of its "
                                       "own, 127.0.0.1 or 0.0.0.0");
      default:
        return Status::InvalidArgument(flag + "cannot serve metrics on " + where + " (" +
                                       (error != 0 ? std::strerror(error) : e.what()) +
                                       "): pick another port with --metrics-port");
    }
  }
  exposer->RegisterCollectable(metrics.registry());
  const std::vector<int> ports = exposer->GetListeningPorts();
  const int listening = ports.empty() ? port : ports.front();
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(exposer), listening));
}

MetricsServer::MetricsServer(std::unique_ptr<prometheus::Exposer> exposer, int port)
    : exposer_(std::move(exposer)), port_(port) {}

MetricsServer::~MetricsServer() = default;

}  // namespace mitra::report
