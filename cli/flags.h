// The command line of one mitra command (run, profile, plan, status, stop, checkpoint): its
// flags, its words, and the program after `--`. CLI11 tells flags, values and words apart;
// what a value must be, and every message, are mitra's:
//
//   mitra run: --batch-size 'abc' is not a whole number >= 1 (e.g. --batch-size 64)
//   mitra run: unknown flag '--batch'; did you mean --batch-size? See `mitra run --help`
//   mitra plan: --top needs a value; see `mitra plan --help`
//
//   Flags flags("plan");
//   flags.Whole("--top", 1, &options.top, "5");
//   flags.Switch("--json", &options.json);
//   if (Status s = flags.Parse(args); !s.ok()) return s;
//   if (flags.help()) ...print PlanUsage()...
//
// Usage texts stay hand-written (RunUsage() and the others), not CLI11's generated help: they
// explain defaults and behaviour in prose (what Ctrl-C does, what a missing --nstages means),
// docs/mitra-run.md quotes them and tests compare them byte for byte, while CLI11's formatter
// prints a type and a one-line description per option.
//
// A Flags writes only through the pointers it was given, and only during Parse; they must
// outlive it. Not thread-safe. Parse once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mitra/common/status.h"

namespace mitra::cli {

class Flags {
 public:
  // `command` names the command in messages: "run" gives `mitra run: ...`.
  explicit Flags(std::string command);
  ~Flags();
  Flags(const Flags&) = delete;
  Flags& operator=(const Flags&) = delete;

  // Flags with a value, given as `--name VALUE` or `--name=VALUE`; when one is repeated the last
  // value counts (--env: every one). `example` is a good value, shown with a bad one. A name may
  // be a short and a long one, "-o,--out" (`-o FILE` or `--out FILE`); messages use the long.
  //
  // Text: any non-empty text; `what` is what it names, e.g. "a file name".
  void Text(const std::string& name, std::string* out, const std::string& what,
            const std::string& example);
  // A whole number in [min, max].
  void Whole(const std::string& name, int64_t min, int64_t* out, const std::string& example,
             int64_t max = int64_t{1} << 50);
  void Whole(const std::string& name, int64_t min, int* out, const std::string& example);
  // The same, left unset when not given.
  void Whole(const std::string& name, int64_t min, std::optional<int64_t>* out,
             const std::string& example, int64_t max = int64_t{1} << 50);
  // A positive number of seconds.
  void Seconds(const std::string& name, double* out, const std::string& example);
  // A list of whole numbers >= 1 such as 1,2,4 (commas or spaces); sorted, without repeats.
  void Wholes(const std::string& name, std::vector<int64_t>* out, const std::string& example);
  // KEY=VALUE, KEY a variable name (letters, digits and '_', not starting with a digit);
  // repeatable, each one appended.
  void Environment(const std::string& name, std::vector<std::pair<std::string, std::string>>* out);

  // A flag without a value: true when given.
  void Switch(const std::string& name, bool* out);

  // The next word that is not a flag or a flag's value (`list` in `mitra checkpoint list DIR`);
  // a word beyond the declared ones is unexpected. Unset when not given.
  void Word(const std::string& name, std::string* out);

  // `-- PROGRAM [ARGS...]` ends the command line: the first `--` hands every argument after it
  // to the program, even ones that look like mitra's flags. `example` is a whole command line
  // that shows where the program goes. A command without Program() refuses `--`.
  void Program(std::string* program, std::vector<std::string>* args, const std::string& example);

  // Reads `args` (the arguments after the command's name) up to the first thing wrong, and
  // returns InvalidArgument naming it and the fix: an unknown flag (with the nearest known
  // one), a word out of place, a flag without its value, a bad value. -h or --help before
  // anything wrong stops the reading and makes help() true.
  Status Parse(const std::vector<std::string>& args);
  bool help() const;

  // For a command with Program(), after Parse and after the command has checked its own
  // required flags: InvalidArgument unless `-- PROGRAM` was given.
  Status CheckProgram() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mitra::cli
