// A user's program built from an install with <mitra/...> includes only: a two-segment
// regression model trained through mitra's Trainer with its own sampler and an evaluation, then
// loaded back from its checkpoint into one process for inference.
#include <cstdio>
#include <cstdlib>
#include <string>

#include <torch/torch.h>

#include <mitra/worker/inference.h>
#include <mitra/worker/trainer.h>

namespace {

class Linear : public mitra::cutpoint::Segment {
 public:
  Linear() : fc_(register_module("fc", torch::nn::Linear(4, 4))) {}
  mitra::cutpoint::Activations Forward(const mitra::cutpoint::Activations& in) override {
    return {{"x", fc_(in.at("x"))}};
  }

 private:
  torch::nn::Linear fc_;
};

class Points : public mitra::worker::Dataset {
 public:
  int64_t Size() const override { return 64; }
  mitra::cutpoint::Activations Get(int64_t i) const override {
    auto x = torch::full({4}, static_cast<float>(i % 7) / 7);
    return {{"x", x}, {"y", x * 2}};
  }
};

// Every other sample, in order.
class EvenSampler : public mitra::worker::Sampler {
 public:
  explicit EvenSampler(int64_t size) : size_(size) {}
  int64_t IndexAt(int64_t position) override { return (2 * position) % size_; }

 private:
  int64_t size_;
};

}  // namespace

int main() {
  mitra::cutpoint::ModelSpec spec;
  spec.AddSegment("first", [] { return std::make_shared<Linear>(); });
  spec.AddSegment("second", [] { return std::make_shared<Linear>(); });
  spec.loss = [](const mitra::cutpoint::Activations& out, const mitra::cutpoint::Activations& b) {
    return (out.at("x") - b.at("y")).pow(2).mean(1).sum();
  };
  spec.micro_batch_independent = true;
  auto data = std::make_shared<Points>();
  const std::string checkpoints = std::string(std::getenv("CONSUMER_DIR")) + "/checkpoints";
  mitra::worker::TrainerOptions options;
  options.max_steps = 3;
  options.runtime.global_batch = 8;
  options.runtime.chunk_size = 4;
  options.runtime.optimizer.name = "sgd";
  options.runtime.optimizer.momentum = 0.9;
  options.runtime.custom_sampler = [](int64_t size, uint64_t) {
    return std::make_unique<EvenSampler>(size);
  };
  options.eval.dataset = data;
  options.eval.metrics = {{"abs_error", [](const auto& out, const auto& b) {
                             return (out.at("x") - b.at("y")).abs().mean(1).sum();
                           }}};
  options.checkpoint.dir = checkpoints;
  const int code = mitra::worker::Trainer(spec, data, options).Run();
  if (code != 0) return code;
  auto model = mitra::worker::InferenceModel::Load(spec, checkpoints);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().message().c_str());
    return 1;
  }
  const auto result = (*model)->Evaluate(*data, options.eval.metrics);
  std::printf("inference: step %lld, loss %.6f, abs_error %.6f\n",
              static_cast<long long>((*model)->step()), result.loss, result.metrics[0].second);
  return 0;
}
