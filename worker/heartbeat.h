// Heartbeat: a thread that prints `@mitra {"event":"heartbeat","rank":R}` every interval, so
// the manager can tell a hung or stopped worker (SIGSTOP, a machine cut off) from one that is
// busy: a process that is alive but silent for --heartbeat-timeout is declared hung.
//
// The thread only prints; it never touches the model. It runs from construction until the
// destructor, which wakes and joins it (returns within microseconds).
#pragma once

#include <condition_variable>
#include <mutex>
#include <thread>

namespace mitra::worker {

class Heartbeat {
 public:
  // `interval_s` <= 0 starts nothing.
  Heartbeat(int rank, double interval_s);
  ~Heartbeat();

  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable wake_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace mitra::worker
