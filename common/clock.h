// Clock: the time seam. Code that decides by time (deadlines, ETAs, record timestamps) asks a
// Clock, so tests drive time by hand (ManualClock) and never sleep.
#pragma once

#include <chrono>
#include <mutex>

namespace mitra {

// Implementations must be thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  // Seconds since the Unix epoch (wall clock; may jump). For timestamps in records.
  virtual double WallSeconds() const = 0;
  // Seconds from an arbitrary origin that never goes back. For durations and deadlines.
  virtual double MonotonicSeconds() const = 0;
};

// The steady clock's instant `seconds` from now (now, for 0 or less): the deadline of code that
// waits on sockets and file descriptors itself rather than on a Clock.
inline std::chrono::steady_clock::time_point SteadyAfter(double seconds) {
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(
             std::chrono::duration<double>(seconds > 0 ? seconds : 0));
}

// The real clocks of the machine.
class SystemClock : public Clock {
 public:
  double WallSeconds() const override;
  double MonotonicSeconds() const override;
};

// A clock that moves only when told to. Both readings advance together.
class ManualClock : public Clock {
 public:
  explicit ManualClock(double wall_seconds = 1.7e9, double monotonic_seconds = 1000.0)
      : wall_(wall_seconds), monotonic_(monotonic_seconds) {}

  double WallSeconds() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return wall_;
  }
  double MonotonicSeconds() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return monotonic_;
  }
  void Advance(double seconds) {
    std::lock_guard<std::mutex> lock(mu_);
    wall_ += seconds;
    monotonic_ += seconds;
  }

 private:
  mutable std::mutex mu_;
  double wall_;
  double monotonic_;
};

}  // namespace mitra
