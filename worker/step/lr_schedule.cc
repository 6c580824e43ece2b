#include "mitra/worker/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace mitra::worker {

double LrSchedule::At(int64_t step) const {
  if (step < warmup_steps) return base * static_cast<double>(step + 1) / warmup_steps;
  if (total_steps <= warmup_steps) return base;
  const double progress = std::min(
      1.0, static_cast<double>(step - warmup_steps) / static_cast<double>(total_steps - warmup_steps));
  const double min_lr = base * min_ratio;
  return min_lr + 0.5 * (base - min_lr) * (1.0 + std::cos(M_PI * progress));
}

std::string LrSchedule::Describe() const {
  std::ostringstream out;  // shortest form: 0.0003
  out << "lr " << base;
  if (warmup_steps > 0) out << ", warm-up " << warmup_steps << " steps";
  if (total_steps > warmup_steps) {
    out << ", cosine to " << base * min_ratio << " at step " << total_steps;
  } else {
    out << (warmup_steps > 0 ? ", then constant" : " constant");
  }
  return out.str();
}

}  // namespace mitra::worker
