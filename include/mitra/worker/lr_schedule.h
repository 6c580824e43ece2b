// LrSchedule: linear warm-up then cosine decay, a pure function of the step.
#pragma once

#include <cstdint>
#include <string>

namespace mitra::worker {

struct LrSchedule {
  double base = 3e-4;
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;   // end of the cosine; 0 keeps `base` after the warm-up
  double min_ratio = 0.1;    // the cosine ends at base * min_ratio

  // Learning rate of 0-based step `step`.
  double At(int64_t step) const;
  // "lr 0.0003, warm-up 100 steps, cosine to 3e-05 at step 1000" (or "..., then constant").
  std::string Describe() const;
};

}  // namespace mitra::worker
