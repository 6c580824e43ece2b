// fashion_train: trains the BatchNorm image classifier on Fashion-MNIST with mitra, evaluating
// test accuracy as it goes.
//
// Started by `mitra run` it takes its place in the job from the environment; started by hand
// it trains alone. With --test-after, rank 0 goes on after training: it loads the newest
// checkpoint into the whole model in one process (mitra/worker/inference.h) and reports the test
// accuracy, the way a program uses a trained model. Run with --help for the options and their
// defaults.
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>

#include <spdlog/spdlog.h>

#include "examples/common/trainer_flags.h"
#include "examples/fashion/classifier_model.h"
#include "examples/fashion/fashion_data.h"
#include "examples/fashion/lion.h"
#include "mitra/worker/inference.h"
#include "mitra/worker/trainer.h"

namespace {

using mitra::examples::AddNumber;
using mitra::examples::AddSwitch;
using mitra::examples::AddText;
using mitra::examples::AddTrainerFlags;
using mitra::examples::AddWhole;
using mitra::examples::ParseFlagsOrExit;

struct Args {
  mitra::examples::ClassifierConfig model;
  std::string data = mitra::examples::kFashionMnistDir;
  int64_t train_samples = 0, test_samples = 0;
  bool test_after = false;
  mitra::worker::TrainerOptions trainer;
};

// The command line over the program's defaults: SGD with momentum, a warm-up and a cosine decay
// over the 1000 steps it trains, evaluating every 250. Exits 2 on a bad flag.
Args Parse(int argc, char** argv) {
  Args a;
  auto& rt = a.trainer.runtime;
  rt.global_batch = 64;
  rt.chunk_size = 16;
  rt.optimizer.name = "sgd";
  rt.optimizer.momentum = 0.9;
  rt.optimizer.weight_decay = 5e-4;
  rt.lr.base = 0.05;
  rt.clip_norm = 0;
  rt.lr.warmup_steps = 50;
  rt.lr.total_steps = 1000;
  a.trainer.max_steps = 1000;
  a.trainer.eval.every = 250;

  CLI::App app{"fashion_train: trains a BatchNorm image classifier on Fashion-MNIST with mitra, "
               "alone or under `mitra run`, evaluating test accuracy as it goes",
               "fashion_train"};
  AddWhole(app, "--width", &a.model.width, 1, "channels of the stem");
  AddNumber(app, "--dropout", &a.model.dropout, 0, "dropout before the classifier layer, below 1");
  AddText(app, "--data", &a.data, "DIR", "the folder of the Fashion-MNIST IDX files");
  AddWhole(app, "--train-samples", &a.train_samples, 0,
           "train on the first N training images only (0: all 60,000)");
  AddWhole(app, "--test-samples", &a.test_samples, 0,
           "evaluate on the first N test images only (0: all 10,000)");
  AddWhole(app, "--eval-every", &a.trainer.eval.every, 0,
           "evaluate every N steps, and after the last (0: after the last only)");
  AddSwitch(app, "--test-after", &a.test_after,
            "after training, rank 0 loads the newest checkpoint into the whole model in one "
            "process and reports its test accuracy");
  AddTrainerFlags(app, &a.trainer, {"lion"});
  ParseFlagsOrExit(app, argc, argv);
  if (a.model.dropout >= 1) {
    std::cerr << "fashion_train: --dropout: '" << a.model.dropout << "' is not below 1\n";
    std::exit(2);
  }
  if (rt.optimizer.name == "lion") {  // the program's own (lion.h)
    const double wd = rt.optimizer.weight_decay;
    rt.optimizer.custom = [wd](const std::vector<torch::Tensor>& params) {
      return mitra::examples::MakeLion(params, {0.9, 0.99, wd});
    };
  }
  return a;
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
  Args a = Parse(argc, argv);
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
