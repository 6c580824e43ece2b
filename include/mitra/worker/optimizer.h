// Optimizer: updates a stage's parameters from their reduced and clipped gradients.
//
// Its state is kept per parameter under names ("exp_avg", "momentum_buffer", ...), and
// checkpointed that way, keyed by segment and parameter name like the parameters themselves
// (docs/checkpoint-format.md), so it restores into any shape. Built in, LibTorch's own
// implementations: SGD (momentum, dampening, Nesterov), Adam and AdamW. A program may supply
// its own by implementing this interface (OptimizerOptions::custom).
//
// Called from the training thread only.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "mitra/common/status.h"

namespace mitra::worker {

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // A short name recorded with checkpoints ("adamw"): resuming under another name starts the
  // optimizer state afresh, with a warning.
  virtual std::string Name() const = 0;
  // The settings in words, for the line that starts a run:
  // "AdamW (betas 0.9, 0.999; eps 1e-08; weight decay 0.01)".
  virtual std::string Describe() const = 0;

  // One update of every parameter with learning rate `lr`.
  virtual void Step(double lr) = 0;

  // The state of `param` as named tensors; empty before its first update. The tensors may be
  // the live state (the checkpointer copies them before the next Step); names hold no '/'.
  virtual std::vector<std::pair<std::string, torch::Tensor>> State(
      const torch::Tensor& param) const = 0;
  // Replaces the state of `param` with tensors State() returned (read back from a checkpoint).
  // InvalidArgument, naming it, when a tensor is missing or of another shape.
  virtual Status SetState(const torch::Tensor& param,
                          const std::map<std::string, torch::Tensor>& state) = 0;
  // How many tensors of each parameter's own shape its state holds once it has been updated
  // (Adam: 2, SGD with momentum: 1), or 0 when unknown. A hint only: the checkpointer prepares
  // that much staging memory before the first save, so that the first save is as cheap as the
  // others.
  virtual int StateTensorsPerParameter() const { return 0; }
};

// `state` (as SetState takes it) moved to the device of `param`: a checkpoint and a peer give
// it in host memory.
std::map<std::string, torch::Tensor> OnDeviceOf(const torch::Tensor& param,
                                                std::map<std::string, torch::Tensor> state);

using OptimizerFactory =
    std::function<std::unique_ptr<Optimizer>(const std::vector<torch::Tensor>& parameters)>;

struct OptimizerOptions {
  std::string name = "adamw";  // sgd | adam | adamw
  // L2 penalty for sgd and adam; decoupled weight decay for adamw.
  double weight_decay = 0.01;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // adam, adamw
  double momentum = 0, dampening = 0;             // sgd
  bool nesterov = false;                          // sgd (needs momentum > 0, dampening 0)
  // A program's own optimizer, used instead of `name` when set. Called once per worker with
  // the parameters of its stage.
  OptimizerFactory custom;
};

// The optimizer `options` describe over `parameters`; InvalidArgument for an unknown name or
// settings LibTorch refuses (Nesterov without momentum, say), naming the fix.
Result<std::unique_ptr<Optimizer>> MakeOptimizer(const OptimizerOptions& options,
                                                 const std::vector<torch::Tensor>& parameters);

}  // namespace mitra::worker
