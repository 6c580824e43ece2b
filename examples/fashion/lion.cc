#include "examples/fashion/lion.h"

#include <map>
#include <sstream>

#include <torch/torch.h>

namespace mitra::examples {
namespace {

class Lion : public worker::Optimizer {
 public:
  Lion(std::vector<torch::Tensor> parameters, const LionOptions& options)
      : parameters_(std::move(parameters)), options_(options) {}

  std::string Name() const override { return "lion"; }
  std::string Describe() const override {
    std::ostringstream out;
    out << "Lion (betas " << options_.beta1 << ", " << options_.beta2 << "; weight decay "
        << options_.weight_decay << "; the program's own)";
    return out.str();
  }

  void Step(double lr) override {
    torch::NoGradGuard no_grad;
    for (const torch::Tensor& p : parameters_) {
      if (!p.grad().defined()) continue;
      const torch::Tensor& g = p.grad();
      torch::Tensor& m = exp_avg_[p.unsafeGetTensorImpl()];
      if (!m.defined()) m = torch::zeros_like(p);
      const torch::Tensor c = m * options_.beta1 + g * (1 - options_.beta1);
      p.mul_(1 - lr * options_.weight_decay).add_(c.sign(), -lr);
      m.mul_(options_.beta2).add_(g, 1 - options_.beta2);
    }
  }

  std::vector<std::pair<std::string, torch::Tensor>> State(
      const torch::Tensor& param) const override {
    auto it = exp_avg_.find(param.unsafeGetTensorImpl());
    if (it == exp_avg_.end()) return {};
    return {{"exp_avg", it->second}};
  }

  Status SetState(const torch::Tensor& param,
                  const std::map<std::string, torch::Tensor>& state) override {
    auto it = state.find("exp_avg");
    if (it == state.end() || !it->second.sizes().equals(param.sizes())) {
      return Status::InvalidArgument("Lion's 'exp_avg' is missing or of another shape");
    }
    exp_avg_[param.unsafeGetTensorImpl()] = it->second;
    return Status::Ok();
  }

 private:
  std::vector<torch::Tensor> parameters_;
  LionOptions options_;
  std::map<const void*, torch::Tensor> exp_avg_;  // by the parameter's TensorImpl
};

}  // namespace

std::unique_ptr<worker::Optimizer> MakeLion(const std::vector<torch::Tensor>& parameters,
                                            const LionOptions& options) {
  return std::make_unique<Lion>(parameters, options);
}

}  // namespace mitra::examples
