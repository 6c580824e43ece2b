// fashion_train: trains the BatchNorm image classifier on Fashion-MNIST with mitra, evaluating
// test accuracy as it goes.
//
// Started by `mitra run` it takes its place in the job from the environment; started by hand
// it trains alone. With --test-after, rank 0 goes on after training: it loads the newest
// checkpoint into the whole model in one process (worker/inference.h) and reports the test
// accuracy, the way a program uses a trained model. Run with --help for the options.
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>

#include <spdlog/spdlog.h>

#include "examples/fashion/classifier_model.h"
#include "examples/fashion/fashion_data.h"
#include "examples/fashion/lion.h"
#include "mitra/worker/inference.h"
#include "mitra/worker/trainer.h"

namespace {

constexpr const char* kUsage = R"(usage: fashion_train [options]
  --width N              channels of the stem (default 16)
  --dropout P            dropout before the classifier layer (default 0)
  --data DIR             Fashion-MNIST IDX files (default /usr/share/datasets/fashion-mnist)
  --train-samples N      train on the first N training images only (default: all 60,000)
  --test-samples N       evaluate on the first N test images only (default: all 10,000)
  --eval-every N         evaluate every N steps, and after the last (default 250; 0: the last only)
  --test-after           after training, rank 0 loads the newest checkpoint into the whole
                         model in one process and reports its test accuracy
  --seed N               initialisation, sample order and dropout (default 1234)
  --steps N              steps to train when mitra run gives no --max-steps (default 1000)
  --batch-size N         global batch when run alone (default 64)
  --chunk-size N         micro-batch size when run alone (default 16)
  --optimizer NAME       sgd | adam | adamw | lion (default sgd; lion is the program's own)
  --lr X                 peak learning rate (default 0.05)
  --momentum X           SGD momentum (default 0.9)
  --nesterov             SGD with Nesterov momentum
  --weight-decay X       weight decay (default 5e-4)
  --warmup N             warm-up steps (default 50)
  --cosine-steps N       cosine decay horizon (default 1000; 0: constant after warm-up)
  --clip X               global gradient norm clip, 0 disables (default 0)
  --schedule NAME        gpipe | 1f1b | varuna (default 1f1b)
  --recompute            recompute activations in the backward (gpipe, 1f1b)
  --partition METHOD     uniform | params | 1,2,1 (default uniform)
  --sampler NAME         shuffled | sequential (default shuffled)
  --precision NAME       fp32 | bf16 | fp16 (default fp32; fp16: a GPU only)
  --device NAME          cpu | cuda (default cpu; cuda: a CUDA build, scripts/gpu-build)
  --checkpoint-dir DIR   checkpoints when run alone (mitra run sets its own)
  --dump-params DIR      after training, write each stage's parameters and buffers to DIR
  --dump-replica R       the replica that writes them (default 0)
  --trace FILE           a chrome trace of one step (the third), per rank (FILE.rank-R.json)
)";

struct Args {
  mitra::examples::ClassifierConfig model;
  std::string data = mitra::examples::kFashionMnistDir;
  int64_t train_samples = 0, test_samples = 0;
  bool test_after = false;
  mitra::worker::TrainerOptions trainer;
};

bool Parse(int argc, char** argv, Args* a) {
  auto& rt = a->trainer.runtime;
  rt.global_batch = 64;
  rt.chunk_size = 16;
  rt.optimizer.name = "sgd";
  rt.optimizer.momentum = 0.9;
  rt.optimizer.weight_decay = 5e-4;
  rt.lr.base = 0.05;
  rt.clip_norm = 0;
  rt.lr.warmup_steps = 50;
  rt.lr.total_steps = 1000;
  a->trainer.max_steps = 1000;
  a->trainer.eval.every = 250;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::cout << kUsage;
      std::exit(0);
    }
    if (flag == "--recompute" || flag == "--nesterov" || flag == "--test-after") {
      (flag == "--recompute" ? rt.recompute
                             : flag == "--nesterov" ? rt.optimizer.nesterov : a->test_after) = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::cerr << "fashion_train: " << flag << " needs a value (or is unknown)\n" << kUsage;
      return false;
    }
    const std::string v = argv[++i];
    try {
      if (flag == "--width") a->model.width = std::stoll(v);
      else if (flag == "--dropout") a->model.dropout = std::stod(v);
      else if (flag == "--data") a->data = v;
      else if (flag == "--train-samples") a->train_samples = std::stoll(v);
      else if (flag == "--test-samples") a->test_samples = std::stoll(v);
      else if (flag == "--eval-every") a->trainer.eval.every = std::stoll(v);
      else if (flag == "--seed") rt.seed = std::stoull(v);
      else if (flag == "--steps") a->trainer.max_steps = std::stoll(v);
      else if (flag == "--batch-size") rt.global_batch = std::stoll(v);
      else if (flag == "--chunk-size") rt.chunk_size = std::stoi(v);
      else if (flag == "--optimizer") rt.optimizer.name = v;
      else if (flag == "--lr") rt.lr.base = std::stod(v);
      else if (flag == "--momentum") rt.optimizer.momentum = std::stod(v);
      else if (flag == "--weight-decay") rt.optimizer.weight_decay = std::stod(v);
      else if (flag == "--warmup") rt.lr.warmup_steps = std::stoll(v);
      else if (flag == "--cosine-steps") rt.lr.total_steps = std::stoll(v);
      else if (flag == "--clip") rt.clip_norm = std::stod(v);
      else if (flag == "--schedule") rt.schedule = v;
      else if (flag == "--partition") rt.partition = v;
      else if (flag == "--sampler") rt.sampler = v;
      else if (flag == "--precision") rt.precision = v;
      else if (flag == "--device") rt.device = v;
      else if (flag == "--checkpoint-dir") a->trainer.checkpoint.dir = v;
      else if (flag == "--dump-params") a->trainer.dump_params = v;
      else if (flag == "--dump-replica") a->trainer.dump_replica = std::stoi(v);
      else if (flag == "--trace") rt.trace_path = v;
      else {
        std::cerr << "fashion_train: unknown option " << flag << "\n" << kUsage;
        return false;
      }
    } catch (const std::exception&) {
      std::cerr << "fashion_train: " << flag << " " << v << ": not a number\n";
      return false;
    }
  }
  if (a->model.width < 1 || a->model.dropout < 0 || a->model.dropout >= 1) {
    std::cerr << "fashion_train: --width must be >= 1 and --dropout in [0, 1)\n";
    return false;
  }
  if (rt.optimizer.name == "lion") {
    const double wd = rt.optimizer.weight_decay;
    rt.optimizer.custom = [wd](const std::vector<torch::Tensor>& params) {
      return mitra::examples::MakeLion(params, {0.9, 0.99, wd});
    };
  }
  return true;
}

// The work after training: the newest checkpoint in one process, on the test set.
int TestAfterTraining(const mitra::cutpoint::ModelSpec& spec, const Args& a,
                      const mitra::worker::Dataset& test) {
  auto placement = mitra::worker::Placement::FromEnvironment();
  if (!placement.ok() || placement->rank != 0) return 0;
  const std::string dir =
      placement->checkpoint_dir.empty() ? a.trainer.checkpoint.dir : placement->checkpoint_dir;
  if (dir.empty()) {
    spdlog::error("--test-after needs a checkpoint directory (--checkpoint-dir when run alone)");
    return 2;
  }
  const auto start = std::chrono::steady_clock::now();
  auto model = mitra::worker::InferenceModel::Load(spec, dir);
  if (!model.ok()) {
    spdlog::error("{}", model.status().message());
    return 1;
  }
  const auto result = (*model)->Evaluate(
      test, {{"accuracy", mitra::examples::CorrectPredictions()}}, a.test_samples);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("test after training: step %lld, loss %.4f, accuracy %.4f on %lld samples (%.2f s)\n",
              static_cast<long long>((*model)->step()), result.loss, result.metrics[0].second,
              static_cast<long long>(result.samples), seconds);
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!Parse(argc, argv, &a)) return 2;
  const mitra::cutpoint::ModelSpec spec = mitra::examples::MakeClassifierSpec(a.model);
  std::shared_ptr<const mitra::worker::Dataset> train, test;
  if (!mitra::worker::DescribeRequested()) {  // describing needs the model, not the data
    auto opened = mitra::examples::FashionMnist::Open(a.data, "train", a.train_samples);
    auto opened_test = mitra::examples::FashionMnist::Open(a.data, "test", a.test_samples);
    for (const auto* s : {&opened.status(), &opened_test.status()}) {
      if (!s->ok()) {
        std::cerr << "fashion_train: " << s->message() << "\n";
        return 2;
      }
    }
    train = *opened;
    test = *opened_test;
    a.trainer.eval.dataset = test;
    a.trainer.eval.metrics = {{"accuracy", mitra::examples::CorrectPredictions()}};
  }
  const int code = mitra::worker::Trainer(spec, train, a.trainer).Run();
  if (code != 0 || !a.test_after || mitra::worker::DescribeRequested()) return code;
  return TestAfterTraining(spec, a, *test);
}
