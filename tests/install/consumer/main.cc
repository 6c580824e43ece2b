// A two-segment regression model trained through mitra's Trainer, built from an install.
#include <torch/torch.h>

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

}  // namespace

int main() {
  mitra::cutpoint::ModelSpec spec;
  spec.AddSegment("first", [] { return std::make_shared<Linear>(); });
  spec.AddSegment("second", [] { return std::make_shared<Linear>(); });
  spec.loss = [](const mitra::cutpoint::Activations& out, const mitra::cutpoint::Activations& b) {
    return (out.at("x") - b.at("y")).pow(2).mean(1).sum();
  };
  mitra::worker::TrainerOptions options;
  options.max_steps = 3;
  options.runtime.global_batch = 8;
  options.runtime.chunk_size = 4;
  return mitra::worker::Trainer(spec, std::make_shared<Points>(), options).Run();
}
