#include "cli/flags.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <functional>
#include <optional>
#include <sstream>

#include "common/strings.h"

namespace mitra::cli {
namespace {

// Thrown from an option's callback, which CLI11 runs as the option is read
// (trigger_on_parse): reading stops at the first bad value, or at --help (an Ok status), and
// Parse catches it. CLI11 lets exceptions of its callbacks through.
struct Stop {
  Status status;
};

// Reads one value into its destination; returns "" when the value is good, else what it
// should have been ("a whole number >= 1").
using Reader = std::function<std::string(const std::string& value)>;

// Levenshtein distance, for "did you mean".
size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// "-x", "--x": a flag. "-1" and "-" are words (CLI11 reads them so too).
bool LooksLikeFlag(const std::string& arg) {
  return arg.size() > 1 && arg[0] == '-' && !std::isdigit(static_cast<unsigned char>(arg[1]));
}

Reader WholeReader(int64_t min, int64_t max, std::function<void(int64_t)> store) {
  return [min, max, store](const std::string& value) -> std::string {
    const std::optional<int64_t> n = ParseInt64(value);
    if (n && *n > max) {
      return "a whole number from " + std::to_string(min) + " to " + std::to_string(max);
    }
    if (!n || *n < min) return "a whole number >= " + std::to_string(min);
    store(*n);
    return "";
  };
}

}  // namespace

struct Flags::Impl {
  std::string command;
  CLI::App app;
  std::vector<std::pair<std::string, bool>> flags;  // (name, takes a value), in order given
  bool help = false;
  std::string* program = nullptr;  // set by Program()
  std::vector<std::string>* program_args = nullptr;
  std::string program_example;
  bool saw_separator = false;

  Status Error(const std::string& problem) const {
    return Status::InvalidArgument("mitra " + command + ": " + problem);
  }
  std::string SeeHelp() const { return "see `mitra " + command + " --help`"; }

  bool TakesValue(const std::string& name) const {
    return std::find(flags.begin(), flags.end(), std::make_pair(name, true)) != flags.end();
  }

  // CLI11 has no "did you mean": the nearest flag by edit distance, or one the argument
  // begins ("--batch" for "--batch-size").
  std::string Suggestion(const std::string& flag) const {
    std::string best;
    size_t best_distance = 3;  // suggest only close matches
    for (const auto& [known, takes_value] : flags) {
      const size_t d = StartsWith(known, flag) && flag.size() > 3 ? 1 : EditDistance(flag, known);
      if (d < best_distance) {
        best = known;
        best_distance = d;
      }
    }
    return best;
  }

  Status Unexpected(const std::string& arg) const {
    if (LooksLikeFlag(arg)) {
      const std::string flag = arg.substr(0, arg.find('='));
      const std::string nearest = Suggestion(flag);
      if (nearest.empty()) return Error("unknown flag '" + flag + "'; " + SeeHelp());
      return Error("unknown flag '" + flag + "'; did you mean " + nearest + "? See `mitra " +
                   command + " --help`");
    }
    if (program != nullptr) {
      return Error("unexpected argument '" + arg +
                   "'; put the program and its arguments after `--`, e.g. " + program_example);
    }
    return Error("unexpected argument '" + arg + "'; " + SeeHelp());
  }

  // What CLI11 could not place (an unknown flag, a word too many), the first one given.
  Status FirstExtra() const {
    const std::vector<std::string> extras = app.remaining();
    return extras.empty() ? Status::Ok() : Unexpected(extras.front());
  }

  // `names` is one flag name, or a short and a long one ("-o,--out"): messages use the last.
  void Add(const std::string& names, const std::string& example, Reader read) {
    std::string name;
    for (size_t begin = 0, end = 0; end != std::string::npos; begin = end + 1) {
      end = names.find(',', begin);
      name = names.substr(begin, end == std::string::npos ? end : end - begin);
      flags.emplace_back(name, true);
    }
    app.add_option(names,
                   [this, name, example, read](const CLI::results_t& values) {
                     const std::string value = values.empty() ? "" : values.back();
                     // CLI11 takes the next argument whatever it is; a flag is not a value.
                     if (StartsWith(value, "--")) {
                       throw Stop{Error(name + " needs a value; " + SeeHelp())};
                     }
                     if (const std::string expected = read(value); !expected.empty()) {
                       throw Stop{Error(name + " '" + value + "' is not " + expected + " (e.g. " +
                                        name + " " + example + ")")};
                     }
                     return true;
                   })
        ->trigger_on_parse();
  }
};

Flags::Flags(std::string command) : impl_(std::make_unique<Impl>()) {
  impl_->command = std::move(command);
  impl_->app.allow_extras();   // reported by Parse, in mitra's words
  impl_->app.set_help_flag();  // CLI11's own help is replaced by the hand-written usage
  impl_->app
      .add_option("-h,--help", [](const CLI::results_t&) -> bool { throw Stop{Status::Ok()}; })
      ->expected(0)
      ->trigger_on_parse();
}

Flags::~Flags() = default;

void Flags::Text(const std::string& name, std::string* out, const std::string& what,
                 const std::string& example) {
  impl_->Add(name, example, [out, what](const std::string& value) -> std::string {
    if (value.empty()) return what;
    *out = value;
    return "";
  });
}

void Flags::Whole(const std::string& name, int64_t min, int64_t* out, const std::string& example,
                  int64_t max) {
  impl_->Add(name, example, WholeReader(min, max, [out](int64_t n) { *out = n; }));
}

void Flags::Whole(const std::string& name, int64_t min, std::optional<int64_t>* out,
                  const std::string& example, int64_t max) {
  impl_->Add(name, example, WholeReader(min, max, [out](int64_t n) { *out = n; }));
}

void Flags::Whole(const std::string& name, int64_t min, int* out, const std::string& example) {
  constexpr int64_t kIntMax = int64_t{1} << 30;  // room to multiply two without overflow
  impl_->Add(name, example,
             WholeReader(min, kIntMax, [out](int64_t n) { *out = static_cast<int>(n); }));
}

void Flags::Seconds(const std::string& name, double* out, const std::string& example) {
  impl_->Add(name, example, [out](const std::string& value) -> std::string {
    const std::optional<double> seconds = ParseDouble(value);
    if (!seconds || *seconds <= 0) return "a positive number of seconds";
    *out = *seconds;
    return "";
  });
}

void Flags::Wholes(const std::string& name, std::vector<int64_t>* out, const std::string& example) {
  impl_->Add(name, example, [out](const std::string& value) -> std::string {
    std::string text = value;
    std::replace(text.begin(), text.end(), ',', ' ');
    std::istringstream in(text);
    std::vector<int64_t> sizes;
    for (std::string word; in >> word;) {
      const std::optional<int64_t> n = ParseInt64(word);
      if (!n || *n < 1) return "a list of whole numbers >= 1";
      sizes.push_back(*n);
    }
    if (sizes.empty()) return "a list of whole numbers >= 1";
    std::sort(sizes.begin(), sizes.end());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
    *out = sizes;
    return "";
  });
}

void Flags::Environment(const std::string& name,
                        std::vector<std::pair<std::string, std::string>>* out) {
  impl_->Add(name, "NCCL_DEBUG=INFO", [out](const std::string& value) -> std::string {
    const size_t eq = value.find('=');
    const std::string key = value.substr(0, eq);
    const bool valid_key = !key.empty() && !std::isdigit(static_cast<unsigned char>(key[0])) &&
                           std::all_of(key.begin(), key.end(), [](char c) {
                             return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
                           });
    if (eq == std::string::npos || !valid_key) {
      return "KEY=VALUE with KEY made of letters, digits and '_', not starting with a digit";
    }
    out->emplace_back(key, value.substr(eq + 1));
    return "";
  });
}

void Flags::Switch(const std::string& name, bool* out) {
  Impl& m = *impl_;
  m.flags.emplace_back(name, false);
  m.app
      .add_option(name,
                  [&m, name, out](const CLI::results_t& values) {
                    // CLI11 gives "true" for the bare flag, and VALUE for `--name=VALUE`.
                    if (values.empty() || values.back() != "true") {
                      throw Stop{m.Error(name + " takes no value; " + m.SeeHelp())};
                    }
                    *out = true;
                    return true;
                  })
      ->expected(0)
      ->trigger_on_parse();
}

void Flags::Word(const std::string& name, std::string* out) { impl_->app.add_option(name, *out); }

void Flags::Program(std::string* program, std::vector<std::string>* args,
                    const std::string& example) {
  impl_->program = program;
  impl_->program_args = args;
  impl_->program_example = example;
}

Status Flags::Parse(const std::vector<std::string>& args) {
  Impl& m = *impl_;
  // The program's part is split off before CLI11 sees anything, so that nothing in it is read
  // as mitra's.
  const auto separator = std::find(args.begin(), args.end(), "--");
  std::vector<std::string> reversed;  // CLI11 reads its arguments from the back
  for (auto it = separator; it != args.begin();) {
    const std::string& arg = *--it;
    const std::string name = arg.substr(0, arg.size() - 1);
    // CLI11 reads `--name=` as `--name` and takes the next argument as its value; mitra
    // reads an empty value, which the flag then refuses with its own message.
    if (EndsWith(arg, "=") && m.TakesValue(name)) {
      reversed.push_back("");
      reversed.push_back(name);
    } else {
      reversed.push_back(arg);
    }
  }
  try {
    m.app.parse(reversed);
  } catch (const Stop& stop) {
    if (Status s = m.FirstExtra(); !s.ok()) return s;  // it came before
    if (!stop.status.ok()) return stop.status;
    m.help = true;
    return Status::Ok();
  } catch (const CLI::ArgumentMismatch& e) {
    if (Status s = m.FirstExtra(); !s.ok()) return s;
    // The arguments ran out before the last flag's value.
    const std::string last = separator == args.begin() ? "" : *std::prev(separator);
    if (!m.TakesValue(last)) return m.Error(std::string(e.what()) + "; " + m.SeeHelp());
    return m.Error(last + " needs a value; " + m.SeeHelp());
  } catch (const CLI::ParseError& e) {
    return m.Error(std::string(e.what()) + "; " + m.SeeHelp());
  }
  if (Status s = m.FirstExtra(); !s.ok()) return s;
  if (separator == args.end()) return Status::Ok();
  if (m.program == nullptr) return m.Error("takes no program; " + m.SeeHelp());
  m.saw_separator = true;
  if (separator + 1 != args.end()) {
    *m.program = *(separator + 1);
    m.program_args->assign(separator + 2, args.end());
  }
  return Status::Ok();
}

bool Flags::help() const { return impl_->help; }

Status Flags::CheckProgram() const {
  const Impl& m = *impl_;
  if (!m.saw_separator) {
    return m.Error("no program given; end the command with `-- PROGRAM [ARGS...]`, e.g. " +
                   m.program_example);
  }
  if (m.program->empty()) {
    return m.Error("no program after `--`; give the training program and its arguments, e.g. " +
                   m.program_example);
  }
  return Status::Ok();
}

}  // namespace mitra::cli
