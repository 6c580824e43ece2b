#include "mitra/worker/optimizer.h"

#include <cmath>
#include <sstream>
#include <type_traits>
#include <utility>

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

namespace mitra::worker {
namespace {

std::string Number(double x) {
  std::ostringstream out;  // shortest form: 0.9, 1e-08
  out << x;
  return out.str();
}

// LibTorch keys an optimizer's state by the parameter's TensorImpl: its address as text in
// 1.x, the address itself in 2.x.
using StateKeyType =
    std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>::key_type;

template <typename Key = StateKeyType>  // a template, so that the other branch is discarded
Key StateKey(const torch::Tensor& param) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream out;
    out << param.unsafeGetTensorImpl();
    return out.str();
  } else {
    return static_cast<Key>(param.unsafeGetTensorImpl());
  }
}

Status Check(const std::map<std::string, torch::Tensor>& state, const std::string& name,
             const torch::Tensor& param, bool scalar) {
  auto it = state.find(name);
  if (it == state.end()) return Status::InvalidArgument("optimizer state '" + name + "' is missing");
  if (!scalar && !it->second.sizes().equals(param.sizes())) {
    return Status::InvalidArgument("optimizer state '" + name + "' is of another shape");
  }
  return Status::Ok();
}

// An Optimizer over one of LibTorch's optimizers, whose per-parameter state is a `ParamState`.
template <typename TorchOptimizer, typename ParamState>
class LibTorchOptimizer : public Optimizer {
 public:
  template <typename Options>
  LibTorchOptimizer(const std::vector<torch::Tensor>& parameters, const Options& options)
      : optimizer_(parameters, options) {}

  void Step(double lr) override {
    for (auto& group : optimizer_.param_groups()) group.options().set_lr(lr);
    optimizer_.step();
  }

 protected:
  // The state of `param`, or null before its first update.
  const ParamState* Find(const torch::Tensor& param) const {
    auto it = optimizer_.state().find(StateKey(param));
    return it == optimizer_.state().end() ? nullptr
                                          : static_cast<const ParamState*>(it->second.get());
  }
  ParamState* Find(const torch::Tensor& param) {
    return const_cast<ParamState*>(std::as_const(*this).Find(param));
  }
  void Put(const torch::Tensor& param, std::unique_ptr<ParamState> state) {
    optimizer_.state()[StateKey(param)] = std::move(state);
  }

  TorchOptimizer optimizer_;
};

class Sgd : public LibTorchOptimizer<torch::optim::SGD, torch::optim::SGDParamState> {
 public:
  Sgd(const std::vector<torch::Tensor>& parameters, const torch::optim::SGDOptions& options)
      : LibTorchOptimizer(parameters, options), options_(options) {}

  std::string Name() const override { return "sgd"; }
  int StateTensorsPerParameter() const override { return options_.momentum() != 0 ? 1 : 0; }
  std::string Describe() const override {
    std::string out = "SGD (momentum " + Number(options_.momentum());
    if (options_.dampening() != 0) out += "; dampening " + Number(options_.dampening());
    if (options_.nesterov()) out += "; Nesterov";
    return out + "; weight decay " + Number(options_.weight_decay()) + ")";
  }
  std::vector<std::pair<std::string, torch::Tensor>> State(
      const torch::Tensor& param) const override {
    const auto* s = Find(param);
    if (s == nullptr || !s->momentum_buffer().defined()) return {};
    return {{"momentum_buffer", s->momentum_buffer()}};
  }
  Status SetState(const torch::Tensor& param,
                  const std::map<std::string, torch::Tensor>& state) override {
    if (Status s = Check(state, "momentum_buffer", param, false); !s.ok()) return s;
    auto s = std::make_unique<torch::optim::SGDParamState>();
    s->momentum_buffer(state.at("momentum_buffer"));
    Put(param, std::move(s));
    return Status::Ok();
  }

 private:
  torch::optim::SGDOptions options_;
};

// Adam and AdamW keep the same state, in LibTorch's structures. Their update is LibTorch's,
// step for step, but each step runs once over every parameter (the _foreach_ operators)
// instead of once per parameter: on a GPU that is a dozen kernel launches per update rather
// than a dozen per parameter tensor, which a model of hundreds of tensors waits on; on the CPU
// the operators loop over the tensors, the same arithmetic (tests/worker/worker_test.cc
// holds it equal to LibTorch's own step, bit for bit).
template <typename TorchOptimizer, typename ParamState, typename Options>
class AdamFamily : public LibTorchOptimizer<TorchOptimizer, ParamState> {
 public:
  AdamFamily(std::string name, std::string title, const std::vector<torch::Tensor>& parameters,
             const Options& options, bool decoupled_weight_decay)
      : LibTorchOptimizer<TorchOptimizer, ParamState>(parameters, options),
        name_(std::move(name)), title_(std::move(title)), options_(options),
        decoupled_(decoupled_weight_decay), parameters_(parameters) {}

  void Step(double lr) override {
    torch::NoGradGuard no_grad;
    // Parameters are grouped by their update count (bias correction depends on it): one
    // group in a job, several only where some parameters went without gradients.
    std::map<int64_t, Group> groups;
    for (const auto& p : parameters_) {
      if (!p.grad().defined()) continue;
      ParamState& s = StateOf(p);
      s.step(s.step() + 1);
      Group& g = groups[s.step()];
      g.params.push_back(p);
      g.grads.push_back(p.grad());
      g.exp_avgs.push_back(s.exp_avg());
      g.exp_avg_sqs.push_back(s.exp_avg_sq());
    }
    for (auto& [step, g] : groups) Update(g, step, lr);
  }

  std::string Name() const override { return name_; }
  int StateTensorsPerParameter() const override { return 2; }  // exp_avg, exp_avg_sq
  std::string Describe() const override {
    return title_ + " (betas " + Number(std::get<0>(options_.betas())) + ", " +
           Number(std::get<1>(options_.betas())) + "; eps " + Number(options_.eps()) +
           "; weight decay " + Number(options_.weight_decay()) + ")";
  }
  std::vector<std::pair<std::string, torch::Tensor>> State(
      const torch::Tensor& param) const override {
    const auto* s = this->Find(param);
    if (s == nullptr) return {};
    return {{"exp_avg", s->exp_avg()},
            {"exp_avg_sq", s->exp_avg_sq()},
            {"step", torch::scalar_tensor(s->step(), torch::kInt64)}};
  }
  Status SetState(const torch::Tensor& param,
                  const std::map<std::string, torch::Tensor>& state) override {
    for (const char* name : {"exp_avg", "exp_avg_sq"}) {
      if (Status s = Check(state, name, param, false); !s.ok()) return s;
    }
    if (Status s = Check(state, "step", param, true); !s.ok()) return s;
    auto s = std::make_unique<ParamState>();
    s->exp_avg(state.at("exp_avg"));
    s->exp_avg_sq(state.at("exp_avg_sq"));
    s->step(state.at("step").template item<int64_t>());
    this->Put(param, std::move(s));
    return Status::Ok();
  }

 private:
  struct Group {
    std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs;
  };

  // The state of `p`, created as LibTorch creates it (zeros, step 0) before its first update.
  ParamState& StateOf(const torch::Tensor& p) {
    if (this->Find(p) == nullptr) {
      auto s = std::make_unique<ParamState>();
      s->step(0);
      s->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
      s->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
      this->Put(p, std::move(s));
    }
    return *this->Find(p);
  }

  // LibTorch's Adam / AdamW arithmetic over a group of parameters updated `step` times.
  void Update(Group& g, int64_t step, double lr) {
    const auto [beta1, beta2] = options_.betas();
    const double wd = options_.weight_decay();
    std::vector<torch::Tensor> grads = g.grads;
    if (decoupled_ && wd != 0) {
      at::_foreach_mul_(g.params, 1 - lr * wd);  // LibTorch multiplies by 1 when wd is 0: exact
    } else if (!decoupled_ && wd != 0) {
      grads = at::_foreach_add(g.grads, g.params, wd);  // L2: gradient + wd * p
    }
    const double bias_correction1 = 1 - std::pow(beta1, static_cast<double>(step));
    const double bias_correction2 = 1 - std::pow(beta2, static_cast<double>(step));
    at::_foreach_mul_(g.exp_avgs, beta1);
    at::_foreach_add_(g.exp_avgs, grads, 1 - beta1);
    at::_foreach_mul_(g.exp_avg_sqs, beta2);
    at::_foreach_addcmul_(g.exp_avg_sqs, grads, grads, 1 - beta2);
    std::vector<torch::Tensor> denom = at::_foreach_sqrt(g.exp_avg_sqs);
    at::_foreach_div_(denom, std::sqrt(bias_correction2));
    at::_foreach_add_(denom, options_.eps());
    at::_foreach_addcdiv_(g.params, g.exp_avgs, denom, -lr / bias_correction1);
  }

  std::string name_, title_;
  Options options_;
  bool decoupled_;
  std::vector<torch::Tensor> parameters_;
};

}  // namespace

std::map<std::string, torch::Tensor> OnDeviceOf(const torch::Tensor& param,
                                                std::map<std::string, torch::Tensor> state) {
  for (auto& [name, tensor] : state) tensor = tensor.to(param.device());
  return state;
}

Result<std::unique_ptr<Optimizer>> MakeOptimizer(const OptimizerOptions& o,
                                                 const std::vector<torch::Tensor>& parameters) {
  if (o.custom) {
    std::unique_ptr<Optimizer> custom = o.custom(parameters);
    if (!custom) return Status::InvalidArgument("the program's optimizer factory returned none");
    return custom;
  }
  const double lr = 1e-3;  // replaced by the schedule's value before every step
  if (o.name == "sgd") {
    if (o.nesterov && (o.momentum <= 0 || o.dampening != 0)) {
      return Status::InvalidArgument(
          "SGD with Nesterov momentum needs momentum > 0 and dampening 0: set a momentum "
          "(e.g. 0.9) or turn Nesterov off");
    }
    return std::unique_ptr<Optimizer>(std::make_unique<Sgd>(
        parameters, torch::optim::SGDOptions(lr)
                        .momentum(o.momentum)
                        .dampening(o.dampening)
                        .nesterov(o.nesterov)
                        .weight_decay(o.weight_decay)));
  }
  if (o.name == "adam") {
    using Adam = AdamFamily<torch::optim::Adam, torch::optim::AdamParamState,
                            torch::optim::AdamOptions>;
    return std::unique_ptr<Optimizer>(std::make_unique<Adam>(
        "adam", "Adam", parameters,
        torch::optim::AdamOptions(lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(
            o.weight_decay),
        /*decoupled_weight_decay=*/false));
  }
  if (o.name == "adamw") {
    using AdamW = AdamFamily<torch::optim::AdamW, torch::optim::AdamWParamState,
                             torch::optim::AdamWOptions>;
    return std::unique_ptr<Optimizer>(std::make_unique<AdamW>(
        "adamw", "AdamW", parameters,
        torch::optim::AdamWOptions(lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(
            o.weight_decay),
        /*decoupled_weight_decay=*/true));
  }
  return Status::InvalidArgument("unknown optimizer '" + o.name +
                                 "' (expected sgd, adam or adamw, or supply your own)");
}

}  // namespace mitra::worker
