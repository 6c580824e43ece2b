#include "examples/fashion/classifier_model.h"

#include <torch/torch.h>

namespace mitra::examples {
namespace {

using cutpoint::Activations;
namespace nn = torch::nn;

nn::Conv2d Conv(int64_t in, int64_t out, int64_t stride) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false));
}

class Stem : public cutpoint::Segment {
 public:
  explicit Stem(const ClassifierConfig& c)
      : conv_(register_module("conv", Conv(1, c.width, 1))),
        bn_(register_module("bn", nn::BatchNorm2d(c.width))) {}
  Activations Forward(const Activations& in) override {
    return {{"x", torch::relu(bn_(conv_(in.at("image"))))}};
  }

 private:
  nn::Conv2d conv_;
  nn::BatchNorm2d bn_;
};

// Two 3x3 convolutions with BatchNorm; the shortcut a strided 1x1 convolution with BatchNorm.
class Block : public cutpoint::Segment {
 public:
  Block(int64_t in, int64_t out)
      : conv1_(register_module("conv1", Conv(in, out, 2))),
        bn1_(register_module("bn1", nn::BatchNorm2d(out))),
        conv2_(register_module("conv2", Conv(out, out, 1))),
        bn2_(register_module("bn2", nn::BatchNorm2d(out))),
        shortcut_(register_module(
            "shortcut", nn::Conv2d(nn::Conv2dOptions(in, out, 1).stride(2).bias(false)))),
        bn_shortcut_(register_module("bn_shortcut", nn::BatchNorm2d(out))) {}
  Activations Forward(const Activations& in) override {
    const torch::Tensor& x = in.at("x");
    auto y = torch::relu(bn1_(conv1_(x)));
    y = bn2_(conv2_(y));
    return {{"x", torch::relu(y + bn_shortcut_(shortcut_(x)))}};
  }

 private:
  nn::Conv2d conv1_;
  nn::BatchNorm2d bn1_;
  nn::Conv2d conv2_;
  nn::BatchNorm2d bn2_;
  nn::Conv2d shortcut_;
  nn::BatchNorm2d bn_shortcut_;
};

class Head : public cutpoint::Segment {
 public:
  Head(int64_t in, double dropout)
      : dropout_(dropout), fc_(register_module("fc", nn::Linear(in, kClasses))) {}
  Activations Forward(const Activations& in) override {
    auto pooled = in.at("x").mean({2, 3});
    // Dropout draws from the generator the runtime seeds per micro-batch and segment, so the
    // same job drops the same units in every shape.
    return {{"logits", fc_(torch::dropout(pooled, dropout_, is_training()))}};
  }

 private:
  static constexpr int64_t kClasses = 10;
  double dropout_;
  nn::Linear fc_;
};

}  // namespace

cutpoint::ModelSpec MakeClassifierSpec(const ClassifierConfig& config) {
  const int64_t w = config.width;
  cutpoint::ModelSpec spec;
  spec.AddSegment("stem", [config] { return std::make_shared<Stem>(config); });
  spec.AddSegment("block1", [w] { return std::make_shared<Block>(w, 2 * w); });
  spec.AddSegment("block2", [w] { return std::make_shared<Block>(2 * w, 4 * w); });
  const double dropout = config.dropout;
  spec.AddSegment("head", [w, dropout] { return std::make_shared<Head>(4 * w, dropout); });
  spec.loss = [](const Activations& out, const Activations& batch) {
    return torch::nn::functional::cross_entropy(
        out.at("logits"), batch.at("label"),
        torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
  };
  return spec;
}

worker::MetricFn CorrectPredictions() {
  return [](const Activations& out, const Activations& batch) {
    return out.at("logits").argmax(1).eq(batch.at("label")).sum();
  };
}

}  // namespace mitra::examples
