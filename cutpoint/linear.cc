#include "mitra/cutpoint/linear.h"

#include <unordered_map>
#include <unordered_set>

#include <torch/autograd.h>
#include <ATen/ATen.h>

namespace mitra::cutpoint {
namespace {

thread_local bool split_backward = false;
thread_local WeightGradients* deferred = nullptr;

// `gradient` (a new tensor of its own: a product or a sum) added into `param`'s .grad, as
// autograd's accumulation would; the first one becomes the .grad itself, as autograd's does.
void Accumulate(const torch::Tensor& param, const torch::Tensor& gradient) {
  torch::NoGradGuard no_grad;
  const torch::Tensor g = gradient.to(param.scalar_type());
  if (param.grad().defined()) {
    param.mutable_grad().add_(g);
  } else {
    param.mutable_grad() = g;
  }
}

// The backward of y = x W^T (+ b): the input gradient now, the weight and bias gradients
// left for later while a B defers them. `bias` is undefined for a layer without one.
torch::autograd::variable_list LinearBackward(torch::autograd::AutogradContext* ctx,
                                              const torch::Tensor& input,
                                              const torch::Tensor& weight,
                                              const torch::Tensor& bias, const torch::Tensor& grad) {
  // Under autocast the forward multiplied in the lower precision of the output: so do these.
  torch::Tensor grad_input;
  if (ctx->needs_input_grad(0)) {
    grad_input = grad.matmul(weight.to(grad.scalar_type())).to(input.scalar_type());
  }
  const bool for_weight = ctx->needs_input_grad(1);
  const bool for_bias = bias.defined() && ctx->needs_input_grad(2);
  auto weights = [input, weight, bias, grad, for_weight, for_bias] {
    // A W runs later, outside autograd's engine and so in grad mode: recorded, the products
    // would keep `grad` and `input` alive in the graph of the .grad they become.
    torch::NoGradGuard no_grad;
    const torch::Tensor g = grad.reshape({-1, grad.size(-1)});
    const torch::Tensor x = input.reshape({-1, input.size(-1)}).to(grad.scalar_type());
    if (for_weight) Accumulate(weight, g.t().mm(x));
    if (for_bias) Accumulate(bias, g.sum(0));
  };
  if (WeightGradients* into = deferred) {
    std::vector<torch::Tensor> params;
    if (for_weight) params.push_back(weight);
    if (for_bias) params.push_back(bias);
    into->Add(std::move(weights), std::move(params));
  } else {
    weights();
  }
  torch::autograd::variable_list out = {grad_input, torch::Tensor()};
  if (bias.defined()) out.push_back(torch::Tensor());
  return out;
}

// y = x W^T + b, splittable.
struct SplittableLinear : torch::autograd::Function<SplittableLinear> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& weight, const torch::Tensor& bias) {
    ctx->save_for_backward({input, weight, bias});
    return at::linear(input, weight, bias);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    return LinearBackward(ctx, saved[0], saved[1], saved[2], grads[0]);
  }
};

// y = x W^T, splittable: LibTorch 1.13's C++ autograd functions take no undefined tensor
// (nn.Linear(..., bias=False), F.linear(x, w)).
struct SplittableLinearWithoutBias : torch::autograd::Function<SplittableLinearWithoutBias> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& weight) {
    ctx->save_for_backward({input, weight});
    return at::linear(input, weight);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    return LinearBackward(ctx, saved[0], saved[1], torch::Tensor(), grads[0]);
  }
};

}  // namespace

void WeightGradients::Run(const std::function<void(const std::vector<torch::Tensor>&)>& done) {
  if (!done) {  // every W but the step's last: nobody listens
    for (Work& work : work_) work.run();
    work_.clear();
    return;
  }
  std::unordered_map<const c10::TensorImpl*, size_t> last;  // parameter -> its last piece
  for (size_t i = 0; i < work_.size(); ++i) {
    for (const torch::Tensor& p : work_[i].params) last[p.unsafeGetTensorImpl()] = i;
  }
  for (size_t i = 0; i < work_.size(); ++i) {
    work_[i].run();
    std::vector<torch::Tensor> whole;
    for (const torch::Tensor& p : work_[i].params) {
      auto it = last.find(p.unsafeGetTensorImpl());
      if (it != last.end() && it->second == i) {
        whole.push_back(p);
        last.erase(it);  // once, even when a piece names it twice
      }
    }
    if (!whole.empty()) done(whole);
  }
  work_.clear();
}

std::vector<torch::Tensor> WeightGradients::Parameters() const {
  std::vector<torch::Tensor> params;
  std::unordered_set<const c10::TensorImpl*> seen;
  for (const Work& work : work_) {
    for (const torch::Tensor& p : work.params) {
      if (seen.insert(p.unsafeGetTensorImpl()).second) params.push_back(p);
    }
  }
  return params;
}

SplitBackward::SplitBackward(bool on) : previous_(split_backward) { split_backward = on; }
SplitBackward::~SplitBackward() { split_backward = previous_; }
bool SplitBackward::active() { return split_backward && torch::GradMode::is_enabled(); }

DeferWeightGradients::DeferWeightGradients(WeightGradients* into) : previous_(deferred) {
  deferred = into;
}
DeferWeightGradients::~DeferWeightGradients() { deferred = previous_; }

torch::Tensor linear(const torch::Tensor& input, const torch::Tensor& weight,
                     const torch::Tensor& bias) {
  // at::linear, not torch::nn::functional::linear: the C++ front end's functional multiplies
  // and then adds the bias in a second pass (in fp32 under autocast); at::linear gives a
  // contiguous input one product with the bias fused (cuBLAS's epilogue on a GPU), as
  // PyTorch's F.linear does.
  if (!SplitBackward::active()) return at::linear(input, weight, bias);
  if (!bias.defined()) return SplittableLinearWithoutBias::apply(input, weight);
  return SplittableLinear::apply(input, weight, bias);
}

torch::Tensor LinearImpl::forward(const torch::Tensor& input) {
  return linear(input, weight, bias);
}

}  // namespace mitra::cutpoint
