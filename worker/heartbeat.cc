#include "worker/heartbeat.h"

#include <chrono>
#include <cstdlib>
#include <string>
#include <utility>

#include "worker/report.h"

namespace mitra::worker {

void StepTimes::Add(int64_t step, double compute_s, double wait_s) {
  std::lock_guard<std::mutex> lock(mu_);
  ++window_.steps;
  window_.last_step = step;
  window_.compute_s += compute_s;
  window_.wait_s += wait_s;
}

StepTimes::Window StepTimes::Take() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(window_, Window{});
}

Heartbeat::Heartbeat(int rank, double interval_s, StepTimes* times) : rank_(rank) {
  if (interval_s <= 0) return;
  thread_ = std::thread([this, interval_s, times] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!done_) {
      lock.unlock();
      Record beat("heartbeat");
      beat.Add("rank", rank_.load());
      if (const StepTimes::Window w = times ? times->Take() : StepTimes::Window{}; w.steps > 0) {
        beat.Add("steps", w.steps)
            .Add("step", w.last_step)
            .Add("compute_s", w.compute_s / w.steps)
            .Add("wait_s", w.wait_s / w.steps);
      }
      beat.Emit();
      lock.lock();
      wake_.wait_for(lock, std::chrono::duration<double>(interval_s), [this] { return done_; });
    }
  });
}

Heartbeat::~Heartbeat() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace mitra::worker
