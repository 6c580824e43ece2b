#include "worker/heartbeat.h"

#include <chrono>
#include <cstdlib>
#include <string>
#include <utility>

#include "worker/comm/report.h"

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
      contract::message::Heartbeat beat;
      beat.rank = rank_.load();
      if (const StepTimes::Window w = times ? times->Take() : StepTimes::Window{}; w.steps > 0) {
        beat.steps = w.steps;
        beat.step = w.last_step;
        beat.compute_s = w.compute_s / w.steps;
        beat.wait_s = w.wait_s / w.steps;
      }
      Emit(beat);
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
