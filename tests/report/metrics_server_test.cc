// MetricsServer on real sockets: what a plain HTTP GET of /metrics answers, and the messages for
// a port that is taken and an address that is not this machine's.
#include "report/metrics_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace mitra::report {
namespace {

// GET /metrics over HTTP/1.0 from 127.0.0.1:`port`: the whole response, "" when none.
std::string HttpGet(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  timeval timeout{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  sockaddr_in where{};
  where.sin_family = AF_INET;
  where.sin_port = htons(static_cast<uint16_t>(port));
  where.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&where), sizeof(where)) == 0) {
    const std::string request = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (::write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
      char buffer[4096];
      for (ssize_t n; (n = ::read(fd, buffer, sizeof(buffer))) > 0;) response.append(buffer, n);
    }
  }
  ::close(fd);
  return response;
}

TEST(MetricsServer, ServesTheRunsMetricsOverHttp) {
  RunMetrics metrics;
  metrics.OnStep(
      JsonObject().SetInt("step", 7).SetNumber("loss", 1.5).SetNumber("samples_per_s", 320));
  Result<std::unique_ptr<MetricsServer>> server = MetricsServer::Start("127.0.0.1", 0, metrics);
  ASSERT_TRUE(server.ok()) << server.status().message();
  ASSERT_GT((*server)->port(), 0);

  const std::string response = HttpGet((*server)->port());
  EXPECT_EQ(response.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << response;
  EXPECT_NE(response.find("Content-Type: text/plain"), std::string::npos) << response;
  EXPECT_NE(response.find("\nmitra_step 7\n"), std::string::npos) << response;
  EXPECT_NE(response.find("\nmitra_loss 1.5\n"), std::string::npos) << response;
  EXPECT_NE(response.find("# HELP mitra_failures_total "), std::string::npos) << response;

  // An update shows in the next scrape.
  metrics.OnStep(JsonObject().SetInt("step", 8).SetNumber("loss", 1.25));
  EXPECT_NE(HttpGet((*server)->port()).find("\nmitra_step 8\n"), std::string::npos);
}

// A client that sends half a request and waits (slowloris) used to hold the only thread for
// civetweb's 30 s request timeout, and every scrape behind it: the scrape is answered while that
// client is still connected, and the server drops the stalled client itself.
TEST(MetricsServer, AClientThatSendsHalfARequestHoldsNoScrapeUp) {
  RunMetrics metrics;
  metrics.OnStep(JsonObject().SetInt("step", 3).SetNumber("loss", 2.0));
  Result<std::unique_ptr<MetricsServer>> server = MetricsServer::Start("127.0.0.1", 0, metrics);
  ASSERT_TRUE(server.ok()) << server.status().message();
  const int stalled = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(stalled, 0);
  sockaddr_in where{};
  where.sin_family = AF_INET;
  where.sin_port = htons(static_cast<uint16_t>((*server)->port()));
  where.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(stalled, reinterpret_cast<const sockaddr*>(&where), sizeof(where)), 0);
  const std::string half = "GET /metr";
  ASSERT_EQ(::write(stalled, half.data(), half.size()), static_cast<ssize_t>(half.size()));

  EXPECT_NE(HttpGet((*server)->port()).find("\nmitra_step 3\n"), std::string::npos);
  char byte;
  // Still connected, unanswered: the scrape did not wait for it to be dropped.
  EXPECT_EQ(::recv(stalled, &byte, 1, MSG_DONTWAIT), -1);
  EXPECT_EQ(errno, EAGAIN);
  // And dropped by the server, not left to hold a thread for good (well within the 5 s here).
  timeval timeout{5, 0};
  ::setsockopt(stalled, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  char buffer[512];
  ssize_t n;
  while ((n = ::recv(stalled, buffer, sizeof(buffer), 0)) > 0) {
  }
  EXPECT_EQ(n, 0) << "the stalled client was not dropped: " << std::strerror(errno);
  ::close(stalled);
}

TEST(MetricsServer, ATakenPortIsRefusedNamingTheFlagAndTheFix) {
  RunMetrics metrics;
  Result<std::unique_ptr<MetricsServer>> first = MetricsServer::Start("127.0.0.1", 0, metrics);
  ASSERT_TRUE(first.ok()) << first.status().message();
  const int port = (*first)->port();
  Result<std::unique_ptr<MetricsServer>> second = MetricsServer::Start("127.0.0.1", port, metrics);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(second.status().message(),
            "--metrics-port " + std::to_string(port) + ": 127.0.0.1:" + std::to_string(port) +
                " is taken by another program (`ss -ltnp` shows which): pick a free port with "
                "--metrics-port");
}

TEST(MetricsServer, AnAddressThatIsNotThisMachinesIsRefused) {
  RunMetrics metrics;
  // 192.0.2.0/24 is reserved for documentation: never a local address.
  Result<std::unique_ptr<MetricsServer>> server = MetricsServer::Start("192.0.2.1", 0, metrics);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().message(),
            "--metrics-address 192.0.2.1 is not an address of this machine: give one of its "
            "own, 127.0.0.1 or 0.0.0.0");
  Result<std::unique_ptr<MetricsServer>> v6 = MetricsServer::Start("::1", 0, metrics);
  ASSERT_FALSE(v6.ok());
  EXPECT_NE(v6.status().message().find("'::1' is not an IPv4 address"), std::string::npos)
      << v6.status().message();
}

}  // namespace
}  // namespace mitra::report
