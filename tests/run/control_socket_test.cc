// ControlServer and SendControlRequest over real Unix sockets in a temporary run directory.
#include "run/control_socket.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <stdexcept>
#include <vector>

#include "tests/common/run_helpers.h"

namespace mitra::run {
namespace {

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Answers {"ok":true,"command":<the request's command>}.
std::string Echo(const JsonObject& request) {
  return JsonObject()
      .SetBool("ok", true)
      .SetString("command", request.GetString("command").value_or(""))
      .ToJson();
}

JsonObject Command(const std::string& name) {
  return JsonObject().SetString("command", name);
}

// A raw client socket connected to `path` (-1 on failure). Without `wait`, the connection may
// still be in the listen backlog, and a full backlog is a failure rather than a wait.
int ConnectRaw(const std::string& path, bool wait = true) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | (wait ? 0 : SOCK_NONBLOCK), 0);
  struct sockaddr_un address {};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  if (::connect(fd, reinterpret_cast<struct sockaddr*>(&address), sizeof(address)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// A socket bound (and, if `listening`, listening) at `path` without a ControlServer: what a
// dead manager leaves behind, or a manager that does not take the lock.
int BindRaw(const std::string& path, bool listening) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un address {};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  EXPECT_EQ(::bind(fd, reinterpret_cast<struct sockaddr*>(&address), sizeof(address)), 0);
  if (listening) {
    EXPECT_EQ(::listen(fd, 4), 0);
  }
  return fd;
}

// Everything the peer sends until it closes (or 5 s pass).
std::string ReadAll(int fd) {
  struct timeval timeout {5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  std::string text;
  char buffer[1024];
  ssize_t n;
  while ((n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0) text.append(buffer, n);
  return text;
}

class ControlSocketTest : public ::testing::Test {
 protected:
  std::string SocketPath() const { return ControlSocketPath(dir_.path()); }
  testing::TempDir dir_;
};

TEST_F(ControlSocketTest, AnswersARequestOnASocketOnlyItsUserMayUse) {
  ControlServer server(SocketPath(), Echo);
  ASSERT_TRUE(server.Start().ok());
  struct stat st {};
  ASSERT_EQ(::lstat(SocketPath().c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  Result<JsonObject> response = SendControlRequest(SocketPath(), Command("status"), 5);
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  EXPECT_EQ(response->ToJson(), R"({"ok":true,"command":"status"})");
  // One connection, one answer: a second request works the same.
  EXPECT_TRUE(SendControlRequest(SocketPath(), Command("stop"), 5).ok());
}

TEST_F(ControlSocketTest, StopRemovesTheSocketAndClientsSayNoManagerRuns) {
  ControlServer server(SocketPath(), Echo);
  ASSERT_TRUE(server.Start().ok());
  server.Stop();
  server.Stop();
  EXPECT_FALSE(::access(SocketPath().c_str(), F_OK) == 0) << "the socket is still there";

  Result<JsonObject> response = SendControlRequest(SocketPath(), Command("status"), 5);
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), Status::Code::kNotFound);
  EXPECT_TRUE(Contains(response.status().message(), "no manager is running on " + dir_.path()))
      << response.status().message();
  EXPECT_TRUE(Contains(response.status().message(), "start one with `mitra run"));
}

TEST_F(ControlSocketTest, ReplacesTheSocketOfADeadManager) {
  ::close(BindRaw(SocketPath(), /*listening=*/false));  // bound, then the process "died"
  ASSERT_EQ(::access(SocketPath().c_str(), F_OK), 0);
  Result<JsonObject> refused = SendControlRequest(SocketPath(), Command("status"), 5);
  EXPECT_EQ(refused.status().code(), Status::Code::kNotFound) << refused.status().ToString();

  ControlServer server(SocketPath(), Echo);
  Status started = server.Start();
  ASSERT_TRUE(started.ok()) << started.ToString();
  EXPECT_TRUE(SendControlRequest(SocketPath(), Command("status"), 5).ok());
}

TEST_F(ControlSocketTest, ASecondManagerOnTheSameRunDirectoryIsRefused) {
  ControlServer first(SocketPath(), Echo);
  ASSERT_TRUE(first.Start().ok());
  ControlServer second(SocketPath(), Echo);
  const Status s = second.Start();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(Contains(s.message(), "a manager is already running on " + dir_.path()))
      << s.message();
  second.Stop();  // must not remove the first one's socket
  EXPECT_TRUE(SendControlRequest(SocketPath(), Command("status"), 5).ok());
}

TEST_F(ControlSocketTest, ALiveSocketWithoutTheLockIsNotTakenOver) {
  const int fd = BindRaw(SocketPath(), /*listening=*/true);
  ControlServer server(SocketPath(), Echo);
  const Status s = server.Start();
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), "a manager is already running on")) << s.message();
  EXPECT_EQ(::access(SocketPath().c_str(), F_OK), 0);
  ::close(fd);
}

TEST_F(ControlSocketTest, RefusesAPathThatIsNotASocket) {
  dir_.Write("control.sock", "not a socket\n");
  ControlServer server(SocketPath(), Echo);
  const Status s = server.Start();
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), "exists and is not a socket; remove it")) << s.message();
}

TEST_F(ControlSocketTest, ChecksThePathLength) {
  const std::string long_dir = dir_.path() + "/" + std::string(120, 'd');
  ControlServer server(ControlSocketPath(long_dir), Echo);
  const Status s = server.Start();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(Contains(s.message(), "Unix sockets allow at most " +
                                        std::to_string(MaxSocketPathLength())))
      << s.message();
  EXPECT_TRUE(Contains(s.message(), "use a shorter --run-dir"));
  Result<JsonObject> r = SendControlRequest(ControlSocketPath(long_dir), Command("status"), 1);
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
}

TEST_F(ControlSocketTest, ASilentClientIsDroppedWithoutBlockingOthers) {
  ControlServerOptions options;
  options.client_timeout_s = 0.5;
  ControlServer server(SocketPath(), Echo, options);
  ASSERT_TRUE(server.Start().ok());
  const int silent = ConnectRaw(SocketPath());
  ASSERT_GE(silent, 0);

  const auto before = std::chrono::steady_clock::now();
  EXPECT_TRUE(SendControlRequest(SocketPath(), Command("status"), 5).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - before, std::chrono::milliseconds(400));

  EXPECT_EQ(ReadAll(silent), "") << "the silent client was answered";  // closed by the server
  EXPECT_LT(std::chrono::steady_clock::now() - before, std::chrono::seconds(3));
  ::close(silent);
}

// Two hundred connections that send nothing, each allowed the whole client deadline (5 s), take
// every place 12 times over; a request still gets its answer at once: each new connection
// takes the place of the oldest that sent nothing.
TEST_F(ControlSocketTest, IdleConnectionsDoNotKeepARequestWaiting) {
  ControlServer server(SocketPath(), Echo);  // 16 places, 5 s per client
  ASSERT_TRUE(server.Start().ok());
  std::vector<int> idle;
  for (int i = 0; i < 200; ++i) {
    const int fd = ConnectRaw(SocketPath(), /*wait=*/false);
    if (fd >= 0) idle.push_back(fd);
  }
  EXPECT_GT(idle.size(), 16u);
  Result<JsonObject> answer = SendControlRequest(SocketPath(), Command("status"), 2);
  ASSERT_TRUE(answer.ok()) << answer.status().message();
  EXPECT_EQ(answer->GetString("command").value_or(""), "status");
  for (int fd : idle) ::close(fd);
}

// Half a request line is stalled too; a complete one, sent before the places ran out, is
// answered, never dropped to make room.
TEST_F(ControlSocketTest, HalfARequestGivesUpItsPlaceButAWholeOneIsAnswered) {
  ControlServer server(SocketPath(), Echo);
  ASSERT_TRUE(server.Start().ok());
  const int whole = ConnectRaw(SocketPath());
  ASSERT_GE(whole, 0);
  const std::string line = Command("stop").ToJson() + "\n";
  ASSERT_EQ(::send(whole, line.data(), line.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(line.size()));
  std::vector<int> halves;
  for (int i = 0; i < 40; ++i) {
    const int fd = ConnectRaw(SocketPath(), /*wait=*/false);
    if (fd < 0) continue;
    ::send(fd, "{\"comm", 6, MSG_NOSIGNAL);
    halves.push_back(fd);
  }
  Result<JsonObject> answer = SendControlRequest(SocketPath(), Command("status"), 2);
  ASSERT_TRUE(answer.ok()) << answer.status().message();
  EXPECT_TRUE(Contains(ReadAll(whole), "\"command\":\"stop\"")) << "the whole request was dropped";
  ::close(whole);
  for (int fd : halves) ::close(fd);
}

TEST_F(ControlSocketTest, RejectsAnOverlongRequest) {
  ControlServerOptions options;
  options.max_request_bytes = 100;
  ControlServer server(SocketPath(), Echo, options);
  ASSERT_TRUE(server.Start().ok());
  const int fd = ConnectRaw(SocketPath());
  const std::string request = "{\"command\":\"" + std::string(200, 'x');  // no end in sight
  ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  const std::string answer = ReadAll(fd);
  EXPECT_EQ(answer, "{\"ok\":false,\"error\":\"request longer than 100 bytes\"}\n");
  ::close(fd);
}

TEST_F(ControlSocketTest, AnswersBadJsonWithAnError) {
  ControlServer server(SocketPath(), Echo);
  ASSERT_TRUE(server.Start().ok());
  const int fd = ConnectRaw(SocketPath());
  const std::string request = "status please\n";
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  const std::string answer = ReadAll(fd);
  EXPECT_TRUE(Contains(answer, "\"ok\":false,\"error\":\"bad request")) << answer;
  ::close(fd);
}

TEST_F(ControlSocketTest, ARequestWithoutItsNewlineIsAnsweredWhenTheClientStopsWriting) {
  ControlServer server(SocketPath(), Echo);
  ASSERT_TRUE(server.Start().ok());
  const int fd = ConnectRaw(SocketPath());
  const std::string request = R"({"command":"status"})";
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  ::shutdown(fd, SHUT_WR);
  EXPECT_EQ(ReadAll(fd), "{\"ok\":true,\"command\":\"status\"}\n");
  ::close(fd);
}

TEST_F(ControlSocketTest, AThrowingHandlerBecomesAnErrorAnswer) {
  ControlServer server(SocketPath(), [](const JsonObject&) -> std::string {
    throw std::runtime_error("snapshot unavailable");
  });
  ASSERT_TRUE(server.Start().ok());
  Result<JsonObject> response = SendControlRequest(SocketPath(), Command("status"), 5);
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  EXPECT_EQ(response->GetString("error"), "the manager failed to answer: snapshot unavailable");
}

TEST_F(ControlSocketTest, APrettyPrintedAnswerTravelsAsOneLine) {
  ControlServer server(SocketPath(), [](const JsonObject&) {
    return std::string("{\n  \"ok\": true,\n  \"state\": \"running\"\n}\n");
  });
  ASSERT_TRUE(server.Start().ok());
  Result<JsonObject> response = SendControlRequest(SocketPath(), Command("status"), 5);
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  EXPECT_EQ(response->GetString("state"), "running");
}

TEST_F(ControlSocketTest, AManagerThatDoesNotAnswerTimesOut) {
  const int fd = BindRaw(SocketPath(), /*listening=*/true);  // accepts into its backlog only
  const auto before = std::chrono::steady_clock::now();
  Result<JsonObject> response = SendControlRequest(SocketPath(), Command("status"), 0.3);
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), Status::Code::kTimeout);
  EXPECT_TRUE(Contains(response.status().message(), "did not answer within 0.3 s"))
      << response.status().message();
  EXPECT_LT(std::chrono::steady_clock::now() - before, std::chrono::seconds(2));
  ::close(fd);
}

}  // namespace
}  // namespace mitra::run
