#include "mitra/worker/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include <torch/torch.h>

namespace mitra::worker {

LossScaler::LossScaler(LossScalerOptions options)
    : options_(options), scale_(options.initial_scale) {}

void LossScaler::Unscale(const std::vector<torch::Tensor>& params) const {
  torch::NoGradGuard no_grad;
  const double inverse = 1.0 / scale_;  // exact: the scale is a power of two
  for (const auto& p : params) {
    if (p.grad().defined()) p.mutable_grad().mul_(inverse);
  }
}

bool LossScaler::Update(double global_squared_norm) {
  if (!std::isfinite(global_squared_norm)) {
    scale_ = std::max(options_.min_scale, scale_ * options_.backoff_factor);
    good_steps_ = 0;
    return true;
  }
  if (++good_steps_ >= options_.growth_interval) {
    scale_ *= options_.growth_factor;
    good_steps_ = 0;
  }
  return false;
}

void LossScaler::Restore(double scale, int64_t good_steps) {
  scale_ = scale;
  good_steps_ = good_steps;
}

}  // namespace mitra::worker
