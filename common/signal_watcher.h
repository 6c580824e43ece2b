// SignalWatcher: turns asynchronous signals into ordinary calls on a thread of its own.
//
// The handler it installs only writes the signal number to a self-pipe (async-signal-safe);
// the watcher's thread reads the pipe and calls `on_signal`, typically to push an event onto
// the manager's queue. This keeps all decisions out of signal context (docs: STYLE.md, Seams).
#pragma once

#include <signal.h>

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "mitra/common/status.h"

namespace mitra {

class SignalWatcher {
 public:
  // Installs handlers for `signals` (e.g. SIGINT, SIGTERM). `on_signal` runs on the watcher's
  // thread, once per delivered signal, and must be thread-safe with respect to the rest of the
  // program. At most one SignalWatcher may exist in a process at a time (the handler finds the
  // pipe through a global); a second Start fails with Internal.
  static Result<std::unique_ptr<SignalWatcher>> Start(const std::vector<int>& signals,
                                                      std::function<void(int)> on_signal);

  // Restores the previous handlers, then stops and joins the thread. Blocks until a running
  // `on_signal` call returns.
  ~SignalWatcher();

  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

 private:
  SignalWatcher() = default;
  void Loop();

  int read_fd_ = -1;
  int write_fd_ = -1;
  std::vector<std::pair<int, struct sigaction>> previous_;
  std::function<void(int)> on_signal_;
  std::thread thread_;
};

// "SIGINT" for SIGINT; "signal 42" for numbers without a name.
std::string SignalName(int signal_number);

}  // namespace mitra
