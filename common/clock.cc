#include "common/clock.h"

#include <chrono>

namespace mitra {

double SystemClock::WallSeconds() const {
  using std::chrono::duration;
  return duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double SystemClock::MonotonicSeconds() const {
  using std::chrono::duration;
  return duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace mitra
