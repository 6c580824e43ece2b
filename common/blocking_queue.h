// BlockingQueue<T>: an unbounded FIFO that any number of threads push to and one thread pops
// from with a timeout. It is how reader threads and signal watchers hand events to the
// manager's loop.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>

namespace mitra {

// Thread-safe. Push never blocks (the queue grows); PopFor blocks for at most `timeout`.
template <typename T>
class BlockingQueue {
 public:
  void Push(T item) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      items_.push_back(std::move(item));
    }
    cv_.notify_one();
  }

  // The oldest item, or nullopt when none arrives within `timeout`.
  template <typename Rep, typename Period>
  std::optional<T> PopFor(std::chrono::duration<Rep, Period> timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [this] { return !items_.empty(); })) return std::nullopt;
    T item = std::move(items_.front());
    items_.pop_front();
    return item;
  }

  // The oldest item, or nullopt at once when the queue is empty.
  std::optional<T> TryPop() { return PopFor(std::chrono::milliseconds(0)); }

  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return items_.size();
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<T> items_;
};

}  // namespace mitra
