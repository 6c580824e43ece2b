#include "worker/step_trace.h"

#include <cstdio>
#include <fstream>
#include <utility>

#include "common/json.h"

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
  std::string out = "{\"traceEvents\":[";
  char buffer[160];
  std::snprintf(buffer, sizeof(buffer),
                "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,\"args\":{\"name\":"
                "\"rank %d (stage %d, replica %d)\"}}",
                rank_, rank_, stage_, replica_);
  out += buffer;
  for (const Event& e : events_) {
    std::snprintf(buffer, sizeof(buffer),
                  ",{\"name\":%s,\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%.1f,\"dur\":%.1f,"
                  "\"args\":{\"step_start_us\":%.1f}}",
                  JsonQuote(e.name).c_str(), rank_, origin_wall_us_ + e.start_us, e.duration_us,
                  origin_wall_us_);
    out += buffer;
  }
  out += "],\"displayTimeUnit\":\"ms\"}\n";
  std::ofstream file(path, std::ios::trunc);
  file << out;
  file.close();
  if (!file) return Status::IoError("cannot write the step trace " + path);
  return Status::Ok();
}

}  // namespace mitra::worker
