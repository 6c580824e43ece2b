// StepTrace: what one training step did on this rank and when — every instruction of its
// schedule, then the data-parallel reduction, tied weights, buffers, the step's all-reduce and
// the update — written as a chrome trace (chrome://tracing, Perfetto).
//
// Times are wall-clock microseconds (the system clock), so the traces of ranks on one machine
// line up; across machines they are as good as the machines' clocks. `mitra plan --validate`
// compares them with the simulator's prediction of the same step. On a GPU, where work is only
// queued, the traced step waits for the device at the end of each event (Now()), so that its
// times are the device's; the step is slower for it, the others are untouched. Not thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "mitra/common/status.h"

namespace mitra::worker {

class StepTrace {
 public:
  using Clock = std::chrono::steady_clock;

  // Names the trace's thread "rank R (stage S, replica D)" and starts the step now.
  // `settle`, when given, waits for the device's queued work (torch::cuda::synchronize).
  StepTrace(int rank, int stage, int replica, std::function<void()> settle = nullptr);

  // The time an event ends: now, after the device's queued work is done when there is a
  // device to settle.
  Clock::time_point Now() const;

  void Add(const std::string& name, Clock::time_point start, Clock::time_point end);
  // Writes the trace (contract/step_trace.h has its format).
  Status Write(const std::string& path) const;

 private:
  struct Event {
    std::string name;
    double start_us, duration_us;
  };
  int rank_, stage_, replica_;
  std::function<void()> settle_;
  Clock::time_point origin_;     // the step's start
  double origin_wall_us_ = 0;    // the same instant on the system clock
  std::vector<Event> events_;
};

}  // namespace mitra::worker
