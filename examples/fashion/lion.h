// Lion (Chen et al., 2023, "Symbolic Discovery of Optimization Algorithms") as a program's own
// optimizer: an example of mitra's Optimizer interface. Each parameter keeps one state tensor,
// "exp_avg", checkpointed by name like the built-in optimizers' state.
//
//   c = b1 m + (1 - b1) g;   p <- p (1 - lr wd) - lr sign(c);   m <- b2 m + (1 - b2) g
#pragma once

#include <memory>
#include <vector>

#include "mitra/worker/optimizer.h"

namespace mitra::examples {

struct LionOptions {
  double beta1 = 0.9, beta2 = 0.99;
  double weight_decay = 0.0;
};

std::unique_ptr<worker::Optimizer> MakeLion(const std::vector<torch::Tensor>& parameters,
                                            const LionOptions& options);

}  // namespace mitra::examples
