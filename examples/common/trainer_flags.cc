#include "examples/common/trainer_flags.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <limits>
#include <sstream>

#include "common/strings.h"
#include "mitra/contract/precision.h"

namespace mitra::examples {
namespace {

// Reads one value into its destination: Ok, or what is wrong with it.
using Reader = std::function<Status(const std::string& value)>;

std::string NumberText(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

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

// A named setting: `parse` says what the names are when the value is none of them.
template <typename T>
void AddNamed(CLI::App& app, const std::string& flag, T* out,
              Result<T> (*parse)(const std::string&), const std::string& default_name,
              const std::string& help) {
  Add(app, flag, "NAME", default_name, help, [out, parse](const std::string& value) {
    Result<T> parsed = parse(value);
    if (!parsed.ok()) return parsed.status();
    *out = *parsed;
    return Status::Ok();
  });
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
  Add(app, flag, "X", NumberText(*out), help, [out, min](const std::string& value) {
    const std::optional<double> x = ParseDouble(value);
    if (!x) return Status::InvalidArgument("'" + value + "' is not a number");
    if (*x < min) {
      return Status::InvalidArgument("'" + value + "' is not a number >= " + NumberText(min));
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
  worker::RuntimeOptions& rt = options->runtime;
  Add(app, "--seed", "N", std::to_string(rt.seed),
      "initial weights, sample order and random numbers",
      WholeReader(0, std::numeric_limits<int64_t>::max(),
                  [seed = &rt.seed](int64_t n) { *seed = static_cast<uint64_t>(n); }));
  AddWhole(app, "--steps", &options->max_steps, 0,
           "steps to train when mitra run gives no --max-steps");
  AddWhole(app, "--batch-size", &rt.global_batch, 1,
           "global batch in samples when run alone (mitra run sets its own)");
  AddWhole(app, "--chunk-size", &rt.chunk_size, 1,
           "micro-batch size when run alone (mitra run sets its own)");

  // The pipeline: a shape the planner chose brings its own (MITRA_SCHEDULE, ...).
  AddNamed(app, "--schedule", &rt.schedule, &planner::ParseScheduleKind,
           planner::ScheduleName(rt.schedule),
           "gpipe, 1f1b, varuna, zb-h1, interleaved or zb-v");
  AddSwitch(app, "--recompute", &rt.recompute,
            "recompute activations in the backward (varuna always does)");
  AddNamed(app, "--partition", &rt.partition, &cutpoint::ParsePartitionMethod,
           cutpoint::PartitionMethodName(rt.partition),
           "segments per stage: uniform, params (balances the parameters) or counts like 1,4,4,3");
  AddWhole(app, "--zero", &rt.zero, 0,
           "1: each replica keeps the optimizer state of its share of the stage only (ZeRO-1)");

  // The update.
  std::vector<std::string> known = {"sgd", "adam", "adamw"};  // mitra/worker/optimizer.h's own
  known.insert(known.end(), optimizers.begin(), optimizers.end());
  Add(app, "--optimizer", "NAME", rt.optimizer.name, Join(known, ", "),
      [name = &rt.optimizer.name, known](const std::string& value) {
        if (std::find(known.begin(), known.end(), value) == known.end()) {
          return Status::InvalidArgument("unknown optimizer '" + value + "' (expected " +
                                         Join(known, ", ") + ")");
        }
        *name = value;
        return Status::Ok();
      });
  AddNumber(app, "--lr", &rt.lr.base, 0, "peak learning rate");
  AddWhole(app, "--warmup", &rt.lr.warmup_steps, 0, "linear warm-up steps");
  AddWhole(app, "--cosine-steps", &rt.lr.total_steps, 0,
           "end of the cosine decay (0: constant after the warm-up)");
  AddNumber(app, "--weight-decay", &rt.optimizer.weight_decay, 0,
            "decoupled for adamw, L2 for sgd and adam");
  AddNumber(app, "--momentum", &rt.optimizer.momentum, 0, "SGD momentum");
  AddSwitch(app, "--nesterov", &rt.optimizer.nesterov, "SGD with Nesterov momentum");
  AddNumber(app, "--clip", &rt.clip_norm, -std::numeric_limits<double>::infinity(),
            "global gradient-norm clip (<= 0 disables)");
  AddNamed(app, "--sampler", &rt.sampler, &worker::ParseSamplerKind,
           worker::SamplerKindName(rt.sampler), "shuffled or sequential");

  // Where and how the stages compute; mitra run --precision wins (MITRA_PRECISION).
  AddNamed(app, "--backend", &rt.backend, &worker::ParseBackend, worker::BackendName(rt.backend),
           "gloo or nccl (nccl: a CUDA build, scripts/gpu-build)");
  AddNamed(app, "--precision", &rt.precision, &contract::ParsePrecision,
           contract::PrecisionName(rt.precision), "fp32, bf16 or fp16 (fp16: a GPU only)");
  AddNamed(app, "--device", &rt.device, &contract::ParseDeviceKind,
           contract::DeviceKindName(rt.device),
           "cpu or cuda (the local rank's GPU; a CUDA build, scripts/gpu-build)");
  AddSwitch(app, "--share-gpus", &rt.share_gpus,
            "cuda: local rank r computes on GPU r mod GPUs (more ranks than GPUs)");
  Add(app, "--loss-scale", "X",
      rt.loss_scaler.enabled ? NumberText(rt.loss_scaler.initial_scale) : "off",
      "dynamic loss scaling from X (fp16 does it from " + NumberText(rt.loss_scaler.initial_scale) +
          " anyway)",
      [scaler = &rt.loss_scaler](const std::string& value) {
        const std::optional<double> x = ParseDouble(value);
        if (!x || *x < 1) return Status::InvalidArgument("'" + value + "' is not a number >= 1");
        scaler->enabled = true;
        scaler->initial_scale = *x;
        return Status::Ok();
      });

  // Output.
  AddText(app, "--checkpoint-dir", &options->checkpoint.dir, "DIR",
          "checkpoints when run alone (mitra run sets its own)");
  AddText(app, "--dump-params", &options->dump_params, "DIR",
          "after training, write each stage's parameters and buffers to this folder");
  AddWhole(app, "--dump-replica", &options->dump_replica, -1,
           "the replica that writes them (-1: every one)");
  AddText(app, "--trace", &rt.trace_path, "FILE",
          "a chrome trace of one step (the third), per rank (FILE.rank-R.json)");
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
