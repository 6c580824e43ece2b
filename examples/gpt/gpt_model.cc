#include "examples/gpt/gpt_model.h"

#include <cmath>
#include <iostream>
#include <mutex>

#include <torch/torch.h>
#include <torch/version.h>

#include "mitra/cutpoint/linear.h"

namespace mitra::examples {
namespace {

using cutpoint::Activations;

void InitLinear(cutpoint::Linear& linear) {
  torch::NoGradGuard no_grad;
  linear->weight.normal_(0.0, 0.02);
  if (linear->bias.defined()) linear->bias.zero_();
}

class Embed : public cutpoint::Segment {
 public:
  explicit Embed(const GptConfig& c)
      : wte_(register_module("wte", torch::nn::Embedding(c.vocab, c.width))),
        wpe_(register_module("wpe", torch::nn::Embedding(c.context, c.width))) {
    torch::NoGradGuard no_grad;
    wte_->weight.normal_(0.0, 0.02);
    wpe_->weight.normal_(0.0, 0.02);
  }
  Activations Forward(const Activations& in) override {
    const torch::Tensor& tokens = in.at("tokens");
    auto positions = torch::arange(tokens.size(1), tokens.options().dtype(torch::kInt64));
    return {{"hidden", wte_(tokens) + wpe_(positions)}};
  }

 private:
  torch::nn::Embedding wte_, wpe_;
};

#if TORCH_VERSION_MAJOR >= 2
// Says once per process, on a GPU, which kernel scaled_dot_product_attention takes for the
// block's q, k and v (flash, memory-efficient, cuDNN or the unfused math): bench/gpu.py
// compares it with PyTorch's choice for the same shapes.
void ReportAttentionKernel(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  static std::once_flag once;
  if (!q.is_cuda()) return;
  std::call_once(once, [&] {
    const int64_t choice = at::_fused_sdp_choice(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                                 /*is_causal=*/true);
    static const char* const kNames[] = {"math", "flash_attention", "efficient_attention",
                                         "cudnn_attention", "overrideable"};
    const char* name = choice >= 0 && choice < 5 ? kNames[choice] : "error";
    std::cerr << "gpt_train: attention kernel " << name << " for q " << q.sizes() << " "
              << q.scalar_type() << "\n";
  });
}
#endif

class Block : public cutpoint::Segment {
 public:
  explicit Block(const GptConfig& c)
      : heads_(c.heads),
        dropout_(c.dropout),
        ln1_(register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.width})))),
        qkv_(register_module("qkv", cutpoint::Linear(c.width, 3 * c.width))),
        proj_(register_module("proj", cutpoint::Linear(c.width, c.width))),
        ln2_(register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.width})))),
        fc_(register_module("fc", cutpoint::Linear(c.width, c.mlp_width))),
        out_(register_module("out", cutpoint::Linear(c.mlp_width, c.width))) {
    for (auto* l : {&qkv_, &proj_, &fc_, &out_}) InitLinear(*l);
  }

  Activations Forward(const Activations& in) override {
    torch::Tensor x = in.at("hidden");
    // Dropout draws from the generator the runtime seeds per micro-batch and segment.
    x = x + torch::dropout(Attention(ln1_(x)), dropout_, is_training());
    x = x + torch::dropout(out_(torch::gelu(fc_(ln2_(x)))), dropout_, is_training());
    return {{"hidden", x}};
  }

 private:
  torch::Tensor Attention(const torch::Tensor& x) {
    const int64_t b = x.size(0), t = x.size(1), c = x.size(2), hd = c / heads_;
    auto qkv = qkv_(x).view({b, t, 3, heads_, hd}).permute({2, 0, 3, 1, 4});  // 3,b,h,t,hd
    auto q = qkv[0], k = qkv[1], v = qkv[2];
#if TORCH_VERSION_MAJOR >= 2
    // LibTorch 2.x: one fused kernel (flash or memory-efficient attention on a GPU), the same
    // causal softmax(q k^T / sqrt(hd)) v as below.
    ReportAttentionKernel(q, k, v);
    auto y = at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                              /*is_causal=*/true);
#else
    auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(hd));
    auto mask = torch::ones({t, t}, x.options().dtype(torch::kBool)).triu(1);
    scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
    auto y = torch::matmul(torch::softmax(scores, -1), v);  // b,h,t,hd
#endif
    return proj_(y.transpose(1, 2).reshape({b, t, c}));
  }

  int64_t heads_;
  double dropout_;
  torch::nn::LayerNorm ln1_;
  cutpoint::Linear qkv_, proj_;  // their weight gradients can wait (schedule zb-h1)
  torch::nn::LayerNorm ln2_;
  cutpoint::Linear fc_, out_;
};

class Head : public cutpoint::Segment {
 public:
  explicit Head(const GptConfig& c)
      : ln_f_(register_module("ln_f",
                              torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.width})))),
        weight_(register_parameter("weight", torch::empty({c.vocab, c.width}))) {
    torch::NoGradGuard no_grad;
    weight_.normal_(0.0, 0.02);  // replaced by embed.wte.weight: the two are tied
  }
  Activations Forward(const Activations& in) override {
    return {{"logits", torch::matmul(ln_f_(in.at("hidden")), weight_.t())}};
  }

 private:
  torch::nn::LayerNorm ln_f_;
  torch::Tensor weight_;
};

}  // namespace

Result<GptConfig> GptConfig::Named(const std::string& name) {
  GptConfig c;
  if (name == "bench") return c;
  if (name == "large") {  // ~101 M parameters: for checkpoint benchmarks
    c.width = 1024;
    c.heads = 16;
    c.mlp_width = 4096;
    return c;
  }
  if (name == "350m") {  // ~352 M parameters in GPT-2 medium's layout: for bench/gpu.py
    c.context = 1024;
    c.width = 1024;
    c.heads = 16;
    c.layers = 28;
    c.mlp_width = 4096;
    return c;
  }
  if (name == "tiny") {
    c.context = 32;
    c.width = 32;
    c.heads = 2;
    c.layers = 2;
    c.mlp_width = 128;
    return c;
  }
  return Status::InvalidArgument("unknown model '" + name +
                                 "' (expected tiny, bench, large or 350m)");
}

cutpoint::ModelSpec MakeGptSpec(const GptConfig& config) {
  cutpoint::ModelSpec spec;
  spec.AddSegment("embed", [config] { return std::make_shared<Embed>(config); });
  for (int64_t i = 0; i < config.layers; ++i) {
    spec.AddSegment("block" + std::to_string(i), [config] { return std::make_shared<Block>(config); });
  }
  spec.AddSegment("head", [config] { return std::make_shared<Head>(config); });
  spec.TieWeights("token_embedding", {"embed.wte.weight", "head.weight"});
  const int64_t vocab = config.vocab;
  spec.loss = [vocab](const Activations& out, const Activations& batch) {
    const torch::Tensor& logits = out.at("logits");
    const torch::Tensor& targets = batch.at("targets");
    auto per_token = torch::nn::functional::cross_entropy(
        logits.reshape({-1, vocab}), targets.reshape({-1}),
        torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
    return per_token.view({targets.size(0), targets.size(1)}).mean(1).sum();
  };
  spec.tokens_per_sample = config.context;
  // LayerNorm only: every sample is computed on its own. Dropout draws its masks for a whole
  // micro-batch at once: with it, the micro-batch size is kept for the job, so that every shape
  // draws the same.
  spec.micro_batch_independent = config.dropout == 0;
  return spec;
}

}  // namespace mitra::examples
