// Heartbeat: a thread that prints `@mitra {"event":"heartbeat","rank":R}` every interval, so
// the manager can tell a hung or stopped worker (SIGSTOP, a machine cut off) from one that is
// busy: a process that is alive but silent for --heartbeat-timeout is declared hung.
//
// A heartbeat also carries how the rank's steps since the previous one went (StepTimes):
// `"steps":K,"step":N,"compute_s":C,"wait_s":W`, the mean seconds per step spent computing and
// waiting for peers, from which the manager finds stragglers (docs/worker-contract.md).
//
// The thread only prints; it never touches the model. It runs from construction until the
// destructor, which wakes and joins it (returns within microseconds).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

namespace mitra::worker {

// The compute and wait time of the steps since the last heartbeat: the training thread adds
// each step, the heartbeat thread takes the window. Thread-safe.
class StepTimes {
 public:
  struct Window {
    int steps = 0;
    int64_t last_step = 0;
    double compute_s = 0;  // sums over the window's steps
    double wait_s = 0;
  };
  void Add(int64_t step, double compute_s, double wait_s);
  Window Take();  // and starts an empty window

 private:
  std::mutex mu_;
  Window window_;
};

class Heartbeat {
 public:
  // `interval_s` <= 0 starts nothing. `times` (may be null) must outlive the heartbeat.
  Heartbeat(int rank, double interval_s, StepTimes* times = nullptr);
  ~Heartbeat();

  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // The rank the records name from now on: a parked worker's place in the next generation.
  void SetRank(int rank) { rank_ = rank; }

 private:
  std::atomic<int> rank_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace mitra::worker
