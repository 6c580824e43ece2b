// gpt_train: trains the byte-level GPT example with mitra.
//
// Started by `mitra run` it takes its place in the job from the environment; started by hand
// it trains alone. Run with --help for the options and their defaults.
#include <iostream>
#include <string>

#include "examples/common/trainer_flags.h"
#include "examples/gpt/gpt_model.h"
#include "examples/gpt/text_dataset.h"
#include "mitra/worker/trainer.h"

int main(int argc, char** argv) {
  std::string model = "bench", data = mitra::examples::kDefaultTextPath;
  double dropout = 0;
  mitra::worker::TrainerOptions options;
  CLI::App app{"gpt_train: trains the byte-level GPT example with mitra, alone or under "
               "`mitra run`",
               "gpt_train"};
  mitra::examples::AddText(app, "--model", &model, "NAME",
                           "tiny, bench, large (~101 M parameters) or 350m (~352 M, for a GPU)");
  mitra::examples::AddText(app, "--data", &data, "PATH", "text file or directory");
  mitra::examples::AddNumber(app, "--dropout", &dropout, 0,
                             "dropout after attention and MLP, below 1");
  mitra::examples::AddTrainerFlags(app, &options);
  mitra::examples::ParseFlagsOrExit(app, argc, argv);

  auto config = mitra::examples::GptConfig::Named(model);
  if (!config.ok()) {
    std::cerr << "gpt_train: --model: " << config.status().message() << "\n";
    return 2;
  }
  if (dropout >= 1) {
    std::cerr << "gpt_train: --dropout: '" << dropout << "' is not below 1\n";
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
