// A tiny model and dataset for the worker's in-process tests (tests/worker/thread_ranks.h).
//
// Segments are dense tanh layers whose weights are a fixed function of the segment's index,
// never drawn from the default generator, which ranks running as threads share. Everything is
// float64, so that a different order of the same additions (micro-batches, replicas, stages)
// moves a result by about 1e-16 of its size and comparisons can be tight.
#pragma once

#include <cmath>
#include <memory>
#include <string>

#include <torch/torch.h>

#include "mitra/cutpoint/linear.h"
#include "mitra/cutpoint/model.h"
#include "mitra/worker/data.h"

namespace mitra::testing {

constexpr int64_t kTinyWidth = 6;

// x -> tanh(x W^T + b), on the activation "x"; W and b are fixed functions of `salt`.
// `splittable`: x W^T + b is cutpoint::linear, whose weight gradients a zero-bubble schedule
// defers to its W instructions.
class DenseSegment : public cutpoint::Segment {
 public:
  explicit DenseSegment(int salt, bool splittable = false) : splittable_(splittable) {
    auto index = torch::arange(kTinyWidth * kTinyWidth, torch::kFloat64);
    weight_ = register_parameter(
        "weight", (0.5 * torch::sin(1.7 * index + 0.9 * salt + 0.3)).reshape({kTinyWidth, kTinyWidth}));
    bias_ = register_parameter(
        "bias", 0.1 * torch::cos(torch::arange(kTinyWidth, torch::kFloat64) + salt));
  }
  cutpoint::Activations Forward(const cutpoint::Activations& inputs) override {
    const torch::Tensor& x = inputs.at("x");
    return {{"x", torch::tanh(splittable_ ? cutpoint::linear(x, weight_, bias_)
                                          : torch::addmm(bias_, x, weight_.t()))}};
  }

 private:
  bool splittable_;
  torch::Tensor weight_, bias_;
};

// `segments` DenseSegments "l0", "l1", ...; the loss is the squared error of the last one's
// "x" against the batch's "y", summed over the samples (as cutpoint::LossFn asks).
inline cutpoint::ModelSpec TinyMlp(int segments, bool splittable = false) {
  cutpoint::ModelSpec spec;
  for (int i = 0; i < segments; ++i) {
    spec.AddSegment("l" + std::to_string(i),
                    [i, splittable] { return std::make_shared<DenseSegment>(i, splittable); });
  }
  spec.loss = [](const cutpoint::Activations& out, const cutpoint::Activations& batch) {
    return (out.at("x") - batch.at("y")).pow(2).sum();
  };
  return spec;
}

// Sample i: "x" and "y", kTinyWidth values each, fixed functions of i.
class TinyDataset : public worker::Dataset {
 public:
  explicit TinyDataset(int64_t size) : size_(size) {}
  int64_t Size() const override { return size_; }
  cutpoint::Activations Get(int64_t i) const override {
    auto k = torch::arange(kTinyWidth, torch::kFloat64);
    return {{"x", torch::sin(0.37 * static_cast<double>(i) + 0.11 * k)},
            {"y", 0.8 * torch::cos(0.23 * static_cast<double>(i) - 0.5 * k)}};
  }

 private:
  int64_t size_;
};

// The samples [begin, end) of `dataset` stacked into a batch.
inline cutpoint::Activations TinyBatch(const worker::Dataset& dataset, int64_t begin,
                                       int64_t end) {
  std::vector<torch::Tensor> x, y;
  for (int64_t i = begin; i < end; ++i) {
    auto sample = dataset.Get(i);
    x.push_back(sample.at("x"));
    y.push_back(sample.at("y"));
  }
  return {{"x", torch::stack(x)}, {"y", torch::stack(y)}};
}

// The largest |a - b| over the elements, relative to the largest |b| (a tensor of zeros: the
// largest |a - b|).
inline double RelativeDifference(const torch::Tensor& a, const torch::Tensor& b) {
  const double scale = b.abs().max().item<double>();
  const double diff = (a - b).abs().max().item<double>();
  return scale > 0 ? diff / scale : diff;
}

}  // namespace mitra::testing
