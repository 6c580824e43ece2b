// gpt_train: trains the byte-level GPT example with mitra.
//
// Started by `mitra run` it takes its place in the job from the environment; started by hand
// it trains alone. Run with --help for the options.
#include <cstdlib>
#include <iostream>
#include <string>

#include <spdlog/spdlog.h>

#include "examples/gpt/gpt_model.h"
#include "examples/gpt/text_dataset.h"
#include "mitra/worker/trainer.h"

namespace {

constexpr const char* kUsage = R"(usage: gpt_train [options]
  --model tiny|bench|large  model size (default bench; large: ~101 M parameters)
  --data PATH            text file or directory (default /usr/share/games/fortunes)
  --seed N               initialisation and sample order (default 1234)
  --steps N              steps to train when mitra run gives no --max-steps (default 100)
  --batch-size N         global batch when run alone (default 32)
  --chunk-size N         micro-batch size when run alone (default 8)
  --schedule NAME        gpipe | 1f1b | varuna (default 1f1b)
  --recompute            recompute activations in the backward (gpipe, 1f1b)
  --partition METHOD     uniform | params | 1,4,4,3 (default uniform)
  --lr X                 peak learning rate (default 3e-4)
  --warmup N             warm-up steps (default 0)
  --cosine-steps N       cosine decay horizon (default 0: constant after warm-up)
  --optimizer NAME       sgd | adam | adamw (default adamw)
  --weight-decay X       weight decay (default 0.01; decoupled for adamw, L2 otherwise)
  --momentum X           SGD momentum (default 0)
  --nesterov             SGD with Nesterov momentum
  --dropout P            dropout after attention and MLP (default 0)
  --sampler NAME         shuffled | sequential (default shuffled)
  --clip X               global gradient norm clip, 0 disables (default 1.0)
  --backend NAME         gloo | nccl (default gloo; nccl: a CUDA build, scripts/gpu-build)
  --precision NAME       fp32 | bf16 | fp16 (default fp32; fp16: a GPU only)
  --device NAME          cpu | cuda (default cpu; cuda: a CUDA build, scripts/gpu-build)
  --loss-scale X         dynamic loss scaling from X (fp16 does it from 65536 anyway)
  --dump-params DIR      after training, write each stage's parameters to DIR
  --trace FILE           a chrome trace of one step (the third), per rank (FILE.rank-R.json)
)";

bool ParseArgs(int argc, char** argv, std::string* model, std::string* data, double* dropout,
               mitra::worker::TrainerOptions* o) {
  auto& rt = o->runtime;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::cout << kUsage;
      std::exit(0);
    }
    if (flag == "--recompute" || flag == "--nesterov") {
      (flag == "--recompute" ? rt.recompute : rt.optimizer.nesterov) = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::cerr << "gpt_train: " << flag << " needs a value (or is unknown)\n" << kUsage;
      return false;
    }
    const std::string v = argv[++i];
    try {
      if (flag == "--model") *model = v;
      else if (flag == "--data") *data = v;
      else if (flag == "--seed") rt.seed = std::stoull(v);
      else if (flag == "--steps") o->max_steps = std::stoll(v);
      else if (flag == "--batch-size") rt.global_batch = std::stoll(v);
      else if (flag == "--chunk-size") rt.chunk_size = std::stoi(v);
      else if (flag == "--schedule") rt.schedule = v;
      else if (flag == "--partition") rt.partition = v;
      else if (flag == "--lr") rt.lr.base = std::stod(v);
      else if (flag == "--warmup") rt.lr.warmup_steps = std::stoll(v);
      else if (flag == "--cosine-steps") rt.lr.total_steps = std::stoll(v);
      else if (flag == "--optimizer") rt.optimizer.name = v;
      else if (flag == "--weight-decay") rt.optimizer.weight_decay = std::stod(v);
      else if (flag == "--momentum") rt.optimizer.momentum = std::stod(v);
      else if (flag == "--dropout") *dropout = std::stod(v);
      else if (flag == "--sampler") rt.sampler = v;
      else if (flag == "--clip") rt.clip_norm = std::stod(v);
      else if (flag == "--backend") rt.backend = v;
      else if (flag == "--precision") rt.precision = v;
      else if (flag == "--device") rt.device = v;
      else if (flag == "--loss-scale") {
        rt.loss_scaler.enabled = true;
        rt.loss_scaler.initial_scale = std::stod(v);
      }
      else if (flag == "--dump-params") o->dump_params = v;
      else if (flag == "--trace") rt.trace_path = v;
      else {
        std::cerr << "gpt_train: unknown option " << flag << "\n" << kUsage;
        return false;
      }
    } catch (const std::exception&) {
      std::cerr << "gpt_train: " << flag << " " << v << ": not a number\n";
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "bench", data = mitra::examples::kDefaultTextPath;
  double dropout = 0;
  mitra::worker::TrainerOptions options;
  if (!ParseArgs(argc, argv, &model, &data, &dropout, &options)) return 2;
  auto config = mitra::examples::GptConfig::Named(model);
  if (!config.ok()) {
    std::cerr << "gpt_train: " << config.status().message() << "\n";
    return 2;
  }
  if (dropout < 0 || dropout >= 1) {
    std::cerr << "gpt_train: --dropout " << dropout << " is not in [0, 1)\n";
    return 2;
  }
  config->dropout = dropout;
  std::shared_ptr<const mitra::worker::Dataset> dataset;
  if (!mitra::worker::DescribeRequested()) {  // describing needs the model, not the data
    auto loaded = mitra::examples::TextDataset::Load(data, config->context);
    if (!loaded.ok()) {
      std::cerr << "gpt_train: " << loaded.status().message() << "\n";
      return 2;
    }
    dataset = *loaded;
  }
  return mitra::worker::Trainer(mitra::examples::MakeGptSpec(*config), dataset, options).Run();
}
