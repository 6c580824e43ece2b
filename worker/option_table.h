// The options of a training program (mitra/worker/trainer.h's TrainerOptions), each written
// once: its Python keyword, its flag, what it is, what values it takes and where it goes.
//
// Everything that lists the options is made from this table: the flags of the C++ programs
// (examples/common/trainer_flags.h), the Python Trainer's keywords and its reading of them
// (python/src/trainer_options.cc), mitra.trainer.DEFAULTS and OPTIONS, and, through
// scripts/trainer-options, the Trainer's keyword-only signature in python/mitra/trainer.py and
// the table in docs/python.md (a test runs the script to find them stale).
//
// A default is not written here: each row reads it from a TrainerOptions, so a program that
// changes a default before reading its flags shows its own.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "mitra/common/status.h"
#include "mitra/worker/trainer.h"

namespace mitra::worker {

// What values an option takes, and the alternative of OptionValue that carries them.
enum class OptionType {
  kWhole,   // int64_t, from `min` to `max`
  kNumber,  // double, at least `min`
  kSwitch,  // bool
  kText,    // std::string, not empty (a path)
  kName,    // std::string, one of the setting's names: `set` refuses others, listing them
  kPair,    // std::pair<double, double>
  kObject,  // a program's object (a dataset, a function): no flag and no value here
};

using OptionValue = std::variant<int64_t, double, bool, std::string, std::pair<double, double>>;

struct TrainerOption {
  std::string name;  // the Python keyword: "batch_size"
  std::string flag;  // the C++ programs' flag: "--batch-size"; empty: the program's to give
  OptionType type = OptionType::kWhole;
  std::string help;  // what it is, without its default
  // Said after the default, as in "(default 0: only after the last step)"; or, for an option
  // with no default value, in parentheses after the help.
  std::string note;
  // What a program may give instead of a name, said after the rest: "or a factory params ->
  // mitra.Optimizer" (the Python Trainer reads it, python/src/trainer_options.cc).
  std::string instead;
  double min = 0;    // kWhole and kNumber
  int64_t max = 0;   // kWhole
  // The option's value in `options`; nullopt when it has none (an object, a path not given).
  std::function<std::optional<OptionValue>(const TrainerOptions&)> get;
  // Stores a value of the option's type, already checked against min and max; a kName's
  // refuses a name it does not know. Null for a kObject.
  std::function<Status(const OptionValue&, TrainerOptions&)> set;
};

// Every option, in the order the help and the docs list them.
const std::vector<TrainerOption>& TrainerOptionTable();

// The row named `name` (the Python keyword); null when there is none.
const TrainerOption* FindTrainerOption(std::string_view name);

// Checks `value` against the option's type and range, then stores it: InvalidArgument saying
// what the value must be ("'0' is not a whole number >= 1").
Status SetTrainerOption(const TrainerOption& option, const OptionValue& value,
                        TrainerOptions& options);

// "0.0003", "1e-08", "32", "true", "0.9,0.999": a value as a flag takes it.
std::string OptionValueText(const OptionValue& value);

}  // namespace mitra::worker
