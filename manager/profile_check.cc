#include "manager/profile_check.h"

#include "common/median.h"

namespace mitra::manager {

std::optional<ProfileCheck::Verdict> ProfileCheck::Observe(double step_s) {
  if (predicted_s_ <= 0 || ++seen_ <= kWarmUpSteps || times_.size() == kMeasuredSteps) {
    return std::nullopt;
  }
  times_.push_back(step_s);
  if (times_.size() < kMeasuredSteps) return std::nullopt;
  Verdict v;
  v.predicted_s = predicted_s_;
  v.measured_s = Median(times_);
  v.ratio = v.measured_s / predicted_s_;
  v.disagrees = v.ratio > kDisagreement || v.ratio < 1 / kDisagreement;
  return v;
}

}  // namespace mitra::manager
