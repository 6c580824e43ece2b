// Linear: torch::nn::Linear, whose weight gradient a zero-bubble schedule can run later.
//
// A zero-bubble schedule (mitra/planner/schedule.h, zb-h1) splits each micro-batch's backward in
// two: B computes the gradients of the stage's inputs, which the previous stage waits for, and W
// the weight gradients, which nothing waits for until the step's end. LibTorch's autograd computes
// both in one pass, so the split is made per layer: inside a training forward of such a
// schedule (a SplitBackward scope on the thread), this layer's backward returns its input's
// gradient and leaves its weight and bias gradients, as work on the saved input and output
// gradient, to the WeightGradients the B collects them in; W runs that work. Everywhere else it
// is torch::nn::Linear, the same graph and the same numbers.
//
// Layers other than this one compute all their gradients in B: the split moves only what these
// layers hold (in a transformer block, the four matrix products' weights: most of the work).
#pragma once

#include <functional>
#include <vector>

#include <torch/nn/modules/linear.h>

namespace mitra::cutpoint {

// The weight-gradient work one B left behind, in the order its layers' backwards ran.
class WeightGradients {
 public:
  // `params`: the parameters whose .grad `work` adds into.
  void Add(std::function<void()> work, std::vector<torch::Tensor> params) {
    work_.push_back({std::move(work), std::move(params)});
  }
  // Runs and drops the work: each gradient is added into its parameter's .grad. After each
  // piece, `done` (when set) gets the parameters no later piece adds into.
  void Run(const std::function<void(const std::vector<torch::Tensor>&)>& done = {});
  // The parameters the work adds into, each once.
  std::vector<torch::Tensor> Parameters() const;
  bool empty() const { return work_.empty(); }

 private:
  struct Work {
    std::function<void()> run;
    std::vector<torch::Tensor> params;
  };
  std::vector<Work> work_;
};

// While alive on a thread, Linear layers that run forwards in grad mode build the splittable
// graph (the runtime opens one around every forward of a zero-bubble schedule).
class SplitBackward {
 public:
  explicit SplitBackward(bool on = true);
  ~SplitBackward();
  SplitBackward(const SplitBackward&) = delete;
  SplitBackward& operator=(const SplitBackward&) = delete;
  // Whether a Linear's forward builds the splittable graph here: inside a scope, in grad mode.
  static bool active();

 private:
  bool previous_;
};

// While alive on a thread, the backwards of splittable Linear layers leave their weight
// gradients in `into` instead of computing them (the runtime opens one around every B). Without
// one, a splittable graph's backward computes every gradient at once.
class DeferWeightGradients {
 public:
  explicit DeferWeightGradients(WeightGradients* into);
  ~DeferWeightGradients();
  DeferWeightGradients(const DeferWeightGradients&) = delete;
  DeferWeightGradients& operator=(const DeferWeightGradients&) = delete;

 private:
  WeightGradients* previous_;
};

// input W^T + bias (bias may be undefined), splittable as above; otherwise at::linear itself
// (PyTorch's F.linear).
torch::Tensor linear(const torch::Tensor& input, const torch::Tensor& weight,
                     const torch::Tensor& bias);

class LinearImpl : public torch::nn::LinearImpl {
 public:
  using torch::nn::LinearImpl::LinearImpl;
  torch::Tensor forward(const torch::Tensor& input);
};
TORCH_MODULE(Linear);

}  // namespace mitra::cutpoint
