#include "worker/heartbeat.h"

#include <chrono>
#include <cstdlib>
#include <string>

#include "worker/report.h"

namespace mitra::worker {

Heartbeat::Heartbeat(int rank, double interval_s) {
  if (interval_s <= 0) return;
  thread_ = std::thread([this, rank, interval_s] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!done_) {
      lock.unlock();
      Record("heartbeat").Add("rank", rank).Emit();
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
