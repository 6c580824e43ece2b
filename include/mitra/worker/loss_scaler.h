// LossScaler: dynamic loss scaling for fp16 training (the scheme of apex and torch.cuda.amp).
//
// The loss is multiplied by scale() before the backward, so that small fp16 gradients do not
// flush to zero; the gradients are divided by it again (Unscale) before clipping and the
// optimizer step. A step whose gradients overflowed (inf or nan) is skipped: the scale is
// halved and nothing is updated. After `growth_interval` good steps in a row the scale doubles.
// Scales are powers of two, so scaling and unscaling are exact.
//
// The runtime decides about overflow from the step's all-reduced squared gradient norm: a
// non-finite local gradient on any rank makes the global sum non-finite on every rank, so every
// rank skips the same step and the scales stay equal without a message of their own.
// Not thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/types.h>

namespace mitra::worker {

struct LossScalerOptions {
  bool enabled = false;          // on for fp16; may be switched on at any precision
  double initial_scale = 65536;  // 2^16, as torch.cuda.amp.GradScaler
  int64_t growth_interval = 2000;
  double growth_factor = 2;
  double backoff_factor = 0.5;
  double min_scale = 1;          // never below: a model that overflows at scale 1 is broken
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerOptions options);

  double scale() const { return scale_; }
  int64_t good_steps() const { return good_steps_; }

  // Divides every defined gradient by the scale (in place, without autograd).
  void Unscale(const std::vector<torch::Tensor>& params) const;

  // Takes the step's verdict: `global_squared_norm` is the all-reduced squared norm of the
  // (still scaled) gradients. Returns true when the step must be skipped (it overflowed), and
  // adjusts the scale either way.
  bool Update(double global_squared_norm);

  // Checkpoint state (trainer.pt: loss_scale, loss_scale_good_steps).
  void Restore(double scale, int64_t good_steps);

 private:
  LossScalerOptions options_;
  double scale_;
  int64_t good_steps_ = 0;
};

}  // namespace mitra::worker
