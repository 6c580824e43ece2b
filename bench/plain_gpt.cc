// plain_gpt: the baseline for bench/throughput.py — the same GPT, data and micro-batching as
// `gpt_train`, trained by a plain single-process LibTorch loop with no mitra runtime.
//
// It reuses the example's layer modules (the computation must be identical) but none of the
// runtime: no schedule, no communicator, no sampler. The tied embedding is handled the plain
// way: the head's copy is aliased to the embedding and its gradient added to the embedding's.
//
// Prints one JSON line: {"bench":"plain_libtorch_gpt","tokens_per_s":...,"step_time_s":...}.
#include <chrono>
#include <cstdio>
#include <string>

#include <torch/torch.h>

#include "examples/common/trainer_flags.h"
#include "examples/gpt/gpt_model.h"
#include "examples/gpt/text_dataset.h"

int main(int argc, char** argv) {
  std::string model = "bench";
  int64_t batch = 32, chunk = 8, steps = 20, warmup = 3, threads = 1;
  CLI::App app{"plain_gpt: gpt_train's model and data in a plain LibTorch loop (the baseline of "
               "bench/throughput.py)",
               "plain_gpt"};
  mitra::examples::AddText(app, "--model", &model, "NAME", "tiny, bench or large");
  mitra::examples::AddWhole(app, "--batch-size", &batch, 1, "global batch in samples");
  mitra::examples::AddWhole(app, "--chunk-size", &chunk, 1, "micro-batch size");
  mitra::examples::AddWhole(app, "--steps", &steps, 1, "timed steps");
  mitra::examples::AddWhole(app, "--warmup", &warmup, 0, "untimed steps before them");
  mitra::examples::AddWhole(app, "--threads", &threads, 1, "LibTorch intra-op threads");
  mitra::examples::ParseFlagsOrExit(app, argc, argv);
  torch::set_num_threads(static_cast<int>(threads));
  auto named = mitra::examples::GptConfig::Named(model);
  if (!named.ok()) {
    std::fprintf(stderr, "plain_gpt: --model: %s\n", named.status().message().c_str());
    return 2;
  }
  const mitra::examples::GptConfig config = *named;
  auto spec = mitra::examples::MakeGptSpec(config);
  auto data = *mitra::examples::TextDataset::Load(mitra::examples::kDefaultTextPath, config.context);

  std::vector<std::shared_ptr<mitra::cutpoint::Segment>> layers;
  for (int i = 0; i < spec.num_segments(); ++i) layers.push_back(mitra::cutpoint::BuildSegment(spec, i, 1234));
  torch::Tensor wte = layers.front()->named_parameters()["wte.weight"];
  torch::Tensor head = layers.back()->named_parameters()["weight"];
  head.set_data(wte);  // one storage; two leaves whose gradients we add below
  std::vector<torch::Tensor> params;
  for (auto& l : layers) {
    for (auto& p : l->parameters()) {
      if (!p.is_same(head)) params.push_back(p);
    }
  }
  torch::optim::AdamW optimizer(params, torch::optim::AdamWOptions(3e-4).weight_decay(0.01));
  auto perm = torch::randperm(data->Size(), torch::kInt64);

  auto run_step = [&](int64_t step) {
    optimizer.zero_grad();
    if (head.grad().defined()) head.mutable_grad().zero_();
    double loss_sum = 0;
    for (int64_t begin = 0; begin < batch; begin += chunk) {
      std::vector<torch::Tensor> tokens, targets;
      for (int64_t j = begin; j < std::min(batch, begin + chunk); ++j) {
        auto s = data->Get(perm[(step * batch + j) % data->Size()].item<int64_t>());
        tokens.push_back(s["tokens"]);
        targets.push_back(s["targets"]);
      }
      mitra::cutpoint::Activations acts{{"tokens", torch::stack(tokens)}};
      for (auto& l : layers) acts = l->Forward(acts);
      auto loss = spec.loss(acts, {{"targets", torch::stack(targets)}}) / static_cast<double>(batch);
      loss.backward();
      loss_sum += loss.item<double>();
    }
    wte.mutable_grad().add_(head.grad());
    torch::nn::utils::clip_grad_norm_(params, 1.0);
    optimizer.step();
    return loss_sum;
  };

  for (int64_t s = 0; s < warmup; ++s) run_step(s);
  const auto start = std::chrono::steady_clock::now();
  double loss = 0;
  for (int64_t s = warmup; s < warmup + steps; ++s) loss = run_step(s);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double tokens = static_cast<double>(steps * batch * config.context);
  std::printf("{\"bench\":\"plain_libtorch_gpt\",\"model\":\"%s\",\"threads\":%ld,\"batch\":%ld,"
              "\"chunk\":%ld,\"steps\":%ld,\"tokens_per_s\":%.1f,\"step_time_s\":%.4f,"
              "\"final_loss\":%.4f}\n",
              model.c_str(), threads, batch, chunk, steps, tokens / seconds, seconds / steps, loss);
  return 0;
}
