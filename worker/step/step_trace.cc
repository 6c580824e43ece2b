#include "worker/step/step_trace.h"

#include <fstream>
#include <utility>

#include "contract/step_trace.h"

namespace mitra::worker {

StepTrace::StepTrace(int rank, int stage, int replica, std::function<void()> settle)
    : rank_(rank), stage_(stage), replica_(replica), settle_(std::move(settle)),
      origin_(Now()) {
  origin_wall_us_ = std::chrono::duration<double, std::micro>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
}

StepTrace::Clock::time_point StepTrace::Now() const {
  if (settle_) settle_();
  return Clock::now();
}

void StepTrace::Add(const std::string& name, Clock::time_point start, Clock::time_point end) {
  events_.push_back({name, std::chrono::duration<double, std::micro>(start - origin_).count(),
                     std::chrono::duration<double, std::micro>(end - start).count()});
}

Status StepTrace::Write(const std::string& path) const {
  contract::TracedStep step;
  step.rank = rank_;
  step.stage = stage_;
  step.replica = replica_;
  step.step_start_us = origin_wall_us_;
  for (const Event& e : events_) {
    step.spans.push_back({e.name, origin_wall_us_ + e.start_us, e.duration_us});
  }
  std::ofstream file(path, std::ios::trunc);
  file << contract::StepTraceJson(step);
  file.close();
  if (!file) return Status::IoError("cannot write the step trace " + path);
  return Status::Ok();
}

}  // namespace mitra::worker
