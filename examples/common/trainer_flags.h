// The command line of a training program built on the Trainer, read with CLI11: the flags that
// every such program shares (the runtime's settings, the steps, checkpoints, dumps and the
// trace) and the program's own, in one CLI::App.
//
//   mitra::worker::TrainerOptions options;         // the program's defaults
//   CLI::App app{"gpt_train: trains the byte-level GPT example", "gpt_train"};
//   mitra::examples::AddTrainerFlags(app, &options);
//   mitra::examples::AddText(app, "--model", &model, "NAME", "tiny, bench or large");
//   mitra::examples::ParseFlagsOrExit(app, argc, argv);
//
// Each flag shows, in --help, the value its destination held when it was added: the program's
// own defaults, so no help text repeats a default. Named settings are parsed as they are read
// (ParseScheduleKind, ParsePrecision, ...), so a bad one is refused before anything starts:
//
//   gpt_train: --schedule: unknown schedule 'zb-x' (expected gpipe, 1f1b, varuna, zb-h1, interleaved or zb-v)
//
// The Add* functions write through the pointers they are given, during ParseFlagsOrExit only;
// the destinations must outlive it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "mitra/worker/trainer.h"

namespace mitra::examples {

// The shared flags, writing into `options`: one per option of worker/option_table.h that has
// a flag (--seed, --steps, --batch-size, ..., --trace; a switch as --x and --no-x).
// `optimizers` names the program's own optimizers beyond sgd, adam and adamw (the program
// builds them); --optimizer refuses any other name.
void AddTrainerFlags(CLI::App& app, worker::TrainerOptions* options,
                     const std::vector<std::string>& optimizers = {});

// A program's own flags, in the same words. Whole numbers and numbers are checked against
// `min` (an int also against 2^30); a flag given twice keeps the last value.
void AddWhole(CLI::App& app, const std::string& flag, int64_t* out, int64_t min,
              const std::string& help);
void AddWhole(CLI::App& app, const std::string& flag, int* out, int min, const std::string& help);
void AddNumber(CLI::App& app, const std::string& flag, double* out, double min,
               const std::string& help);
// Any non-empty text; `label` says what it is in --help ("PATH", "DIR").
void AddText(CLI::App& app, const std::string& flag, std::string* out, const std::string& label,
             const std::string& help);
// A flag without a value: true when given.
void AddSwitch(CLI::App& app, const std::string& flag, bool* out, const std::string& help);

// Reads the command line. -h or --help prints every flag with its default and exits 0. A bad
// flag or value prints one line to stderr, "<program>: <what is wrong and what it takes>", and
// exits 2: bad configuration, which `mitra run` reports before it starts the job
// (docs/worker-contract.md). Returns only when every flag was good.
void ParseFlagsOrExit(CLI::App& app, int argc, const char* const* argv);

}  // namespace mitra::examples
