// overflow_train: a worker program whose gradients overflow on one stage only, for the loss
// scaler's test (precision_test.cc).
//
// Two segments, meant for two stages: "a" (Linear 4 -> 4) and "b" (Linear 4 -> 1 on a DETACHED
// copy of a's output, so no gradient flows back to stage 0: its parameters always get zero
// gradients, finite). The loss is sum(w * |out|) with w = 1 for every sample but `--bad N`,
// whose w is 1e30: with the sequential sampler the step that takes it has a loss gradient
// (w / B times the loss scale) that overflows fp32 on stage 1 alone, while its loss stays finite.
//   overflow_train --bad 16 --loss-scale 1099511627776 [--steps N --dump-params DIR]
// With `--attached 1`, b's input is not detached: under `--precision bf16` a's output (a Linear's:
// bf16 under autocast) then crosses the stage boundary as bf16, and its bf16 gradient comes back.
#include <cstdlib>
#include <iostream>
#include <string>

#include <torch/torch.h>

#include "mitra/worker/trainer.h"

namespace {

using mitra::cutpoint::Activations;

class Lin : public mitra::cutpoint::Segment {
 public:
  Lin(int64_t in, int64_t out, bool detach, std::string input, std::string output)
      : fc_(register_module("fc", torch::nn::Linear(in, out))), detach_(detach),
        input_(std::move(input)), output_(std::move(output)) {}
  Activations Forward(const Activations& inputs) override {
    torch::Tensor x = inputs.at(input_);
    Activations out = inputs;
    out.erase(input_);
    out[output_] = fc_(detach_ ? x.detach() : x);
    return out;
  }

 private:
  torch::nn::Linear fc_;
  bool detach_;
  std::string input_, output_;
};

class Samples : public mitra::worker::Dataset {
 public:
  explicit Samples(int64_t bad) : bad_(bad) {}
  int64_t Size() const override { return 64; }
  Activations Get(int64_t index) const override {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(index) + 1);
    return {{"x", torch::randn({4}, gen)}, {"w", torch::full({1}, index == bad_ ? 1e30 : 1.0)}};
  }

 private:
  int64_t bad_;
};

}  // namespace

int main(int argc, char** argv) {
  mitra::worker::TrainerOptions options;
  auto& rt = options.runtime;
  rt.sampler = mitra::worker::SamplerKind::kSequential;
  rt.optimizer.name = "sgd";
  rt.optimizer.weight_decay = 0.1;  // stage 0 changes in every step it is not skipped
  rt.lr.base = 0.01;
  rt.clip_norm = 0;
  rt.global_batch = 8;
  rt.chunk_size = 4;
  int64_t bad = -1;
  bool attached = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], v = argv[i + 1];
    if (flag == "--bad") bad = std::stoll(v);
    else if (flag == "--steps") options.max_steps = std::stoll(v);
    else if (flag == "--batch-size") rt.global_batch = std::stoll(v);
    else if (flag == "--dump-params") options.dump_params = v;
    else if (flag == "--precision") {
      auto precision = mitra::contract::ParsePrecision(v);
      if (!precision.ok()) {
        std::cerr << "overflow_train: --precision: " << precision.status().message() << "\n";
        return 2;
      }
      rt.precision = *precision;
    } else if (flag == "--attached") attached = v == "1";
    else if (flag == "--loss-scale") {
      rt.loss_scaler.enabled = true;
      rt.loss_scaler.initial_scale = std::stod(v);
    } else {
      std::cerr << "overflow_train: unknown option " << flag << "\n";
      return 2;
    }
  }
  mitra::cutpoint::ModelSpec spec;
  spec.AddSegment("a", [] { return std::make_shared<Lin>(4, 4, false, "x", "h"); });
  spec.AddSegment("b", [attached] { return std::make_shared<Lin>(4, 1, !attached, "h", "out"); });
  spec.loss = [](const Activations& out, const Activations& batch) {
    return (batch.at("w") * out.at("out").abs()).sum();
  };
  spec.micro_batch_independent = true;
  return mitra::worker::Trainer(spec, std::make_shared<Samples>(bad), options).Run();
}
