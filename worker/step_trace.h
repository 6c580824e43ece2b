// StepTrace: what one training step did on this rank and when — every instruction of its
// schedule, then the data-parallel reduction, tied weights, buffers, the step's all-reduce and
// the update — written as a chrome trace (chrome://tracing, Perfetto).
//
// Times are wall-clock microseconds (the system clock), so the traces of ranks on one machine
// line up; across machines they are as good as the machines' clocks. `mitra plan --validate`
// compares them with the simulator's prediction of the same step. Not thread-safe.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "mitra/common/status.h"

namespace mitra::worker {

class StepTrace {
 public:
  using Clock = std::chrono::steady_clock;

  // Names the trace's thread "rank R (stage S, replica D)" and starts the step now.
  StepTrace(int rank, int stage, int replica);

  void Add(const std::string& name, Clock::time_point start, Clock::time_point end);
  // Writes {"traceEvents": [...]}; the events carry "step_start_us" in their args.
  Status Write(const std::string& path) const;

 private:
  struct Event {
    std::string name;
    double start_us, duration_us;
  };
  int rank_, stage_, replica_;
  Clock::time_point origin_;     // the step's start
  double origin_wall_us_ = 0;    // the same instant on the system clock
  std::vector<Event> events_;
};

}  // namespace mitra::worker
