#include "examples/common/trainer_flags.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <limits>

#include "common/strings.h"
#include "worker/option_table.h"

namespace mitra::examples {
namespace {

// Reads one value into its destination: Ok, or what is wrong with it.
using Reader = std::function<Status(const std::string& value)>;

void Add(CLI::App& app, const std::string& flag, const std::string& type,
         const std::string& default_text, const std::string& help, Reader read) {
  app.add_option_function<std::string>(
         flag,
         [flag, read](const std::string& value) {
           if (Status s = read(value); !s.ok()) throw CLI::ValidationError(flag, s.message());
         },
         help)
      ->type_name(type)
      ->default_str(default_text)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

Reader WholeReader(int64_t min, int64_t max, std::function<void(int64_t)> store) {
  return [min, max, store](const std::string& value) {
    const std::optional<int64_t> n = ParseInt64(value);
    if (n && *n > max) {
      return Status::InvalidArgument("'" + value + "' is not a whole number from " +
                                     std::to_string(min) + " to " + std::to_string(max));
    }
    if (!n || *n < min) {
      return Status::InvalidArgument("'" + value +
                                     "' is not a whole number >= " + std::to_string(min));
    }
    store(*n);
    return Status::Ok();
  };
}

// What --help shows a flag's value as.
std::string TypeName(worker::OptionType type) {
  switch (type) {
    case worker::OptionType::kWhole: return "N";
    case worker::OptionType::kNumber: return "X";
    case worker::OptionType::kText: return "PATH";
    case worker::OptionType::kName: return "NAME";
    case worker::OptionType::kPair: return "X,Y";
    default: return "";
  }
}

// A flag's text as a value of `type` (SetTrainerOption checks the range).
Result<worker::OptionValue> FlagValue(worker::OptionType type, const std::string& text) {
  const std::string quoted = "'" + text + "'";
  switch (type) {
    case worker::OptionType::kWhole:
      if (const std::optional<int64_t> n = ParseInt64(text)) return worker::OptionValue(*n);
      return Status::InvalidArgument(quoted + " is not a whole number");
    case worker::OptionType::kNumber:
      if (const std::optional<double> x = ParseDouble(text)) return worker::OptionValue(*x);
      return Status::InvalidArgument(quoted + " is not a number");
    case worker::OptionType::kPair: {
      const size_t comma = text.find(',');
      const std::optional<double> a = ParseDouble(text.substr(0, comma));
      const std::optional<double> b =
          comma == std::string::npos ? std::nullopt : ParseDouble(text.substr(comma + 1));
      if (a && b) return worker::OptionValue(std::make_pair(*a, *b));
      return Status::InvalidArgument(quoted + " is not two numbers X,Y");
    }
    default:
      return worker::OptionValue(text);
  }
}

[[noreturn]] void Refuse(const CLI::App& app, const std::string& problem) {
  std::cerr << app.get_name() << ": " << problem << std::endl;
  std::exit(2);
}

// "unknown flag '--batch'; did you mean --batch-size?" for the first argument nothing took.
std::string Unexpected(const CLI::App& app, const std::string& arg) {
  const std::string see = "see `" + app.get_name() + " --help`";
  if (!StartsWith(arg, "-")) return "unexpected argument '" + arg + "'; " + see;
  const std::string flag = arg.substr(0, arg.find('='));
  const size_t dashes = flag.find_first_not_of('-');
  const std::string word = dashes == std::string::npos ? "" : flag.substr(dashes);
  for (const CLI::Option* option : app.get_options()) {
    for (const std::string& name : option->get_lnames()) {
      if (word.size() >= 3 && (StartsWith(name, word) || StartsWith(word, name))) {
        return "unknown flag '" + flag + "'; did you mean --" + name + "? (" + see + ")";
      }
    }
  }
  return "unknown flag '" + flag + "'; " + see;
}

}  // namespace

void AddWhole(CLI::App& app, const std::string& flag, int64_t* out, int64_t min,
              const std::string& help) {
  Add(app, flag, "N", std::to_string(*out), help,
      WholeReader(min, std::numeric_limits<int64_t>::max(), [out](int64_t n) { *out = n; }));
}

void AddWhole(CLI::App& app, const std::string& flag, int* out, int min, const std::string& help) {
  constexpr int64_t kMax = int64_t{1} << 30;  // room to multiply two without overflow
  Add(app, flag, "N", std::to_string(*out), help,
      WholeReader(min, kMax, [out](int64_t n) { *out = static_cast<int>(n); }));
}

void AddNumber(CLI::App& app, const std::string& flag, double* out, double min,
               const std::string& help) {
  Add(app, flag, "X", worker::OptionValueText(*out), help, [out, min](const std::string& value) {
    const std::optional<double> x = ParseDouble(value);
    if (!x) return Status::InvalidArgument("'" + value + "' is not a number");
    if (*x < min) {
      return Status::InvalidArgument("'" + value +
                                     "' is not a number >= " + worker::OptionValueText(min));
    }
    *out = *x;
    return Status::Ok();
  });
}

void AddText(CLI::App& app, const std::string& flag, std::string* out, const std::string& label,
             const std::string& help) {
  Add(app, flag, label, *out, help, [out](const std::string& value) {
    if (value.empty()) return Status::InvalidArgument("needs a value that is not empty");
    *out = value;
    return Status::Ok();
  });
}

void AddSwitch(CLI::App& app, const std::string& flag, bool* out, const std::string& help) {
  app.add_flag(flag, *out, help);
}

void AddTrainerFlags(CLI::App& app, worker::TrainerOptions* options,
                     const std::vector<std::string>& optimizers) {
  std::vector<std::string> known = {"sgd", "adam", "adamw"};  // mitra/worker/optimizer.h's own
  known.insert(known.end(), optimizers.begin(), optimizers.end());
  for (const worker::TrainerOption& option : worker::TrainerOptionTable()) {
    if (option.flag.empty()) continue;
    const std::optional<worker::OptionValue> value = option.get(*options);
    // "(0: only at the end and on stop)": what the note says of the value it follows.
    std::string help = option.name == "optimizer" ? Join(known, " | ") : option.help;
    if (!option.note.empty()) {
      help += " (" + (value ? worker::OptionValueText(*value) + ": " : "") + option.note + ")";
    }
    if (option.type == worker::OptionType::kSwitch) {  // --x or --x=true, --x=false
      app.add_flag_function(
             option.flag,
             [&option, options](int64_t count) {
               (void)worker::SetTrainerOption(option, count > 0, *options);
             },
             help)
          ->default_str(worker::OptionValueText(*value))
          ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
      continue;
    }
    Add(app, option.flag, TypeName(option.type), value ? worker::OptionValueText(*value) : "", help,
        [&option, options, known](const std::string& text) {
          Result<worker::OptionValue> value = FlagValue(option.type, text);
          if (!value.ok()) return value.status();
          if (option.name == "optimizer" &&
              std::find(known.begin(), known.end(), text) == known.end()) {
            return Status::InvalidArgument("unknown optimizer '" + text + "' (expected " +
                                           Join(known, ", ") + ")");
          }
          return worker::SetTrainerOption(option, *value, *options);
        });
  }
}

void ParseFlagsOrExit(CLI::App& app, int argc, const char* const* argv) {
  // Unknown flags are reported below, in our words; the flags and defaults fit one column.
  app.allow_extras();
  app.get_formatter()->column_width(36);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    std::exit(0);
  } catch (const CLI::ValidationError& e) {
    Refuse(app, e.what());  // the flag, and what it takes
  } catch (const CLI::ParseError& e) {
    Refuse(app, std::string(e.what()) + "; see `" + app.get_name() + " --help`");
  }
  if (!app.remaining().empty()) Refuse(app, Unexpected(app, app.remaining().front()));
}

}  // namespace mitra::examples
