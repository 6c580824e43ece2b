// The run directory's control socket, `RUN_DIR/control.sock`, through which `mitra status` and
// `mitra stop` talk to a running manager.
//
// Protocol: the client connects, writes one request line (a JSON object such as
// {"command":"status"} followed by '\n'), reads one response line (a JSON object), and the
// server closes the connection. Responses carry "ok": true, or "ok": false with "error" (a
// message for the user); the fields of each command are in status_report.h.
//
// Access: the socket file is mode 0600 from the moment it exists (only the manager's user may
// connect), and RUN_DIR/control.sock.lock, held with flock() while the server runs, keeps a
// second manager off a run directory.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/json.h"
#include "mitra/common/status.h"

namespace mitra::run {

// RUN_DIR/control.sock.
std::string ControlSocketPath(const std::string& run_dir);

// The longest socket path bind() and connect() accept (sizeof sockaddr_un::sun_path - 1).
size_t MaxSocketPathLength();

struct ControlServerOptions {
  // A client must have sent its whole request line within this many seconds of connecting,
  // and taken the response within as many again; otherwise it is dropped.
  double client_timeout_s = 5;
  // Longer request lines are answered with an error and dropped.
  size_t max_request_bytes = 64 * 1024;
  // Connections served at once. When all are taken, a new connection takes the place of the
  // oldest one still to complete its request with nothing more sent (mitra's clients write
  // their request line at once: a connection that sends nothing or half a line is stalled, and
  // stalled connections must not keep `mitra status` waiting); when none is stalled, new ones
  // wait in the listen backlog.
  int max_clients = 16;
};

// Serves the control socket on a thread of its own.
class ControlServer {
 public:
  // Answers one request: returns the response, one JSON object (newlines in it are sent as
  // spaces, so pretty-printed JSON is fine). Runs on the server's thread, one call at a time;
  // it must be thread-safe with respect to the rest of the manager (typically it reads a
  // snapshot under a mutex or pushes an event) and quick: while it runs no other client is
  // served. An exception it throws becomes an {"ok":false,"error":...} response.
  using Handler = std::function<std::string(const JsonObject& request)>;

  // `socket_path` is normally ControlSocketPath(run_dir); messages name its directory as the
  // run directory. Nothing happens before Start().
  ControlServer(std::string socket_path, Handler handler, ControlServerOptions options = {});
  // Stops (see Stop).
  ~ControlServer();

  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Creates the socket (replacing one a dead manager left behind) and starts serving. Errors:
  //   InvalidArgument  the path is longer than MaxSocketPathLength(); another manager is
  //                    running on this run directory (it holds the lock or answers on the
  //                    socket); the path exists and is not a socket
  //   IoError          the OS refused (the directory is missing or read-only, ...)
  // Blocks for at most a fraction of a second (one connection attempt to an old socket).
  Status Start();
  // Stops accepting, closes open connections, waits for the thread (and a running handler),
  // removes the socket file and releases the lock. Idempotent; a no-op before Start().
  void Stop();

  const std::string& socket_path() const { return socket_path_; }

 private:
  struct Client;
  Status Bind();
  // The server's thread: polls until Stop(), serving every client, one request each.
  void Loop();
  // Takes the connections waiting, up to options_.max_clients, each one past it in the place
  // of a stalled client (ControlServerOptions::max_clients).
  void Accept(std::vector<Client>& clients) const;
  // With every place taken, the stalled client whose place a new connection takes (the oldest
  // that has not completed its request and has nothing more waiting to be read); end() when
  // there is a free place or no stalled client.
  std::vector<Client>::iterator MakeRoom(std::vector<Client>& clients) const;
  bool HasRoom(std::vector<Client>& clients) const;  // a free place, or one MakeRoom can make
  // Reads what `client` sent and writes its answer as far as the socket takes it; false when
  // the client is finished (answered, gone, or broken).
  bool Serve(Client& client) const;
  // Reads the request line; false when the client is gone before sending one.
  bool ReadRequest(Client& client) const;
  std::string Answer(const std::string& request_line) const;  // runs the handler
  void Respond(Client& client, std::string response) const;   // queues the answer

  const std::string socket_path_;
  const Handler handler_;
  const ControlServerOptions options_;

  int lock_fd_ = -1;
  int listen_fd_ = -1;
  int wake_fd_ = -1;
  uint64_t socket_inode_ = 0;  // of the file we bound, so Stop removes only ours
  bool running_ = false;
  std::thread thread_;
};

// Sends `request` to the manager listening on `socket_path` and returns its response. Blocks
// for at most `timeout_s` in all. Errors:
//   NotFound         no manager is running there (no socket, or a stale one: ENOENT,
//                    ECONNREFUSED); the message says to start one with `mitra run`
//   InvalidArgument  the path is too long for a Unix socket
//   Timeout          the manager accepted but did not answer in time
//   IoError          anything else (permission denied, a malformed response, ...)
// Thread-safe.
Result<JsonObject> SendControlRequest(const std::string& socket_path, const JsonObject& request,
                                      double timeout_s);

// Whether a manager answers connections on `socket_path` now (connect() succeeds). Does not
// send a request.
bool ControlSocketIsLive(const std::string& socket_path);

}  // namespace mitra::run
