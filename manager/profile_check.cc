#include "manager/profile_check.h"

#include <algorithm>

namespace mitra::manager {

std::optional<ProfileCheck::Verdict> ProfileCheck::Observe(double step_s) {
  if (predicted_s_ <= 0 || ++seen_ <= kWarmUpSteps || times_.size() == kMeasuredSteps) {
    return std::nullopt;
  }
  times_.push_back(step_s);
  if (times_.size() < kMeasuredSteps) return std::nullopt;
  std::vector<double> sorted = times_;
  std::nth_element(sorted.begin(), sorted.begin() + kMeasuredSteps / 2, sorted.end());
  Verdict v;
  v.predicted_s = predicted_s_;
  v.measured_s = sorted[kMeasuredSteps / 2];
  v.ratio = v.measured_s / predicted_s_;
  v.disagrees = v.ratio > kDisagreement || v.ratio < 1 / kDisagreement;
  return v;
}

}  // namespace mitra::manager
