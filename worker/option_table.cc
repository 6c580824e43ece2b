#include "worker/option_table.h"

#include <cmath>
#include <limits>
#include <sstream>
#include <type_traits>

#include "mitra/contract/precision.h"
#include "mitra/cutpoint/partition.h"
#include "mitra/planner/schedule.h"
#include "mitra/worker/backend.h"

namespace mitra::worker {
namespace {

constexpr double kNoMin = -std::numeric_limits<double>::infinity();

std::string NumberText(double x) {
  std::ostringstream out;
  out << x;
  return out.str();
}

TrainerOption Row(std::string name, std::string flag, OptionType type, std::string help,
                  std::string note = "") {
  TrainerOption o;
  o.name = std::move(name);
  o.flag = std::move(flag);
  o.type = type;
  o.help = std::move(help);
  o.note = std::move(note);
  return o;
}

// The rows below name their field with a generic lambda, `[](auto& o) -> auto& { return
// o.runtime.lr.base; }`, which serves both the reading (const) and the writing side.
#define MITRA_FIELD(path) [](auto& o) -> auto& { return o.path; }

// A whole number in a field of any integer type; an `int` field stops at 2^30, room to multiply
// two without overflow.
template <typename Field>
TrainerOption Whole(std::string name, std::string flag, std::string help, std::string note,
                    int64_t min, Field field, int64_t max = 0) {
  using T = std::remove_reference_t<decltype(field(std::declval<TrainerOptions&>()))>;
  if (max == 0) {
    max = sizeof(T) < sizeof(int64_t) ? int64_t{1} << 30 : std::numeric_limits<int64_t>::max();
  }
  TrainerOption o = Row(std::move(name), std::move(flag), OptionType::kWhole, std::move(help),
                        std::move(note));
  o.min = static_cast<double>(min);
  o.max = max;
  o.get = [field](const TrainerOptions& t) {
    return std::optional<OptionValue>(static_cast<int64_t>(field(t)));
  };
  o.set = [field](const OptionValue& v, TrainerOptions& t) {
    field(t) = static_cast<T>(std::get<int64_t>(v));
    return Status::Ok();
  };
  return o;
}

template <typename Field>
TrainerOption Number(std::string name, std::string flag, std::string help, std::string note,
                     double min, Field field) {
  TrainerOption o = Row(std::move(name), std::move(flag), OptionType::kNumber, std::move(help),
                        std::move(note));
  o.min = min;
  o.get = [field](const TrainerOptions& t) { return std::optional<OptionValue>(field(t)); };
  o.set = [field](const OptionValue& v, TrainerOptions& t) {
    field(t) = std::get<double>(v);
    return Status::Ok();
  };
  return o;
}

template <typename Field>
TrainerOption Switch(std::string name, std::string flag, std::string help, std::string note,
                     Field field) {
  TrainerOption o = Row(std::move(name), std::move(flag), OptionType::kSwitch, std::move(help),
                        std::move(note));
  o.get = [field](const TrainerOptions& t) { return std::optional<OptionValue>(field(t)); };
  o.set = [field](const OptionValue& v, TrainerOptions& t) {
    field(t) = std::get<bool>(v);
    return Status::Ok();
  };
  return o;
}

// A path: empty in TrainerOptions means not given.
template <typename Field>
TrainerOption Text(std::string name, std::string flag, std::string help, Field field) {
  TrainerOption o = Row(std::move(name), std::move(flag), OptionType::kText, std::move(help));
  o.get = [field](const TrainerOptions& t) {
    return field(t).empty() ? std::nullopt : std::optional<OptionValue>(field(t));
  };
  o.set = [field](const OptionValue& v, TrainerOptions& t) {
    field(t) = std::get<std::string>(v);
    return Status::Ok();
  };
  return o;
}

// A named setting, read by `parse` (ParseScheduleKind, ...) and written by `name_of`.
template <typename T, typename Field, typename NameOf>
TrainerOption Named(std::string name, std::string flag, std::string help, Field field,
                    Result<T> (*parse)(const std::string&), NameOf name_of) {
  TrainerOption o = Row(std::move(name), std::move(flag), OptionType::kName, std::move(help));
  o.get = [field, name_of](const TrainerOptions& t) {
    return std::optional<OptionValue>(std::string(name_of(field(t))));
  };
  o.set = [field, parse](const OptionValue& v, TrainerOptions& t) {
    Result<T> parsed = parse(std::get<std::string>(v));
    if (!parsed.ok()) return parsed.status();
    field(t) = *parsed;
    return Status::Ok();
  };
  return o;
}

// An object only a program can give (a dataset, a function); the Python Trainer reads each.
TrainerOption Object(std::string name, std::string help) {
  return Row(std::move(name), "", OptionType::kObject, std::move(help));
}

TrainerOption LossScale() {
  TrainerOption o = Row(
      "loss_scale", "--loss-scale", OptionType::kNumber, "dynamic loss scaling from this scale",
      "fp16 scales from " + NumberText(LossScalerOptions{}.initial_scale) + " anyway");
  o.min = 1;
  o.get = [](const TrainerOptions& t) -> std::optional<OptionValue> {
    const LossScalerOptions& s = t.runtime.loss_scaler;
    return s.enabled ? std::optional<OptionValue>(s.initial_scale) : std::nullopt;
  };
  o.set = [](const OptionValue& v, TrainerOptions& t) {
    t.runtime.loss_scaler.enabled = true;
    t.runtime.loss_scaler.initial_scale = std::get<double>(v);
    return Status::Ok();
  };
  return o;
}

TrainerOption Betas() {
  TrainerOption o = Row("betas", "--betas", OptionType::kPair, "adam and adamw");
  o.get = [](const TrainerOptions& t) {
    const OptimizerOptions& opt = t.runtime.optimizer;
    return std::optional<OptionValue>(std::make_pair(opt.beta1, opt.beta2));
  };
  o.set = [](const OptionValue& v, TrainerOptions& t) {
    std::tie(t.runtime.optimizer.beta1, t.runtime.optimizer.beta2) =
        std::get<std::pair<double, double>>(v);
    return Status::Ok();
  };
  return o;
}

// The optimizer's name is checked when the optimizer is made (mitra/worker/optimizer.h): a
// program may bring its own.
TrainerOption OptimizerName() {
  TrainerOption o = Row("optimizer", "--optimizer", OptionType::kName, "sgd | adam | adamw");
  o.instead = "or a factory params -> mitra.Optimizer";
  o.get = [](const TrainerOptions& t) {
    return std::optional<OptionValue>(t.runtime.optimizer.name);
  };
  o.set = [](const OptionValue& v, TrainerOptions& t) {
    t.runtime.optimizer.name = std::get<std::string>(v);
    return Status::Ok();
  };
  return o;
}

// The batch (mitra run's --batch-size, --chunk-size and --max-steps win over these).
void AddBatch(std::vector<TrainerOption>& t) {
  t.push_back(Whole("batch_size", "--batch-size", "global batch in samples", "", 1,
                    MITRA_FIELD(runtime.global_batch)));
  t.push_back(Whole("chunk_size", "--chunk-size", "micro-batch size", "", 1,
                    MITRA_FIELD(runtime.chunk_size)));
  t.push_back(Whole("max_steps", "--steps", "steps to train when mitra run gives no --max-steps",
                    "", 0, MITRA_FIELD(max_steps)));
  t.push_back(Whole("seed", "--seed", "initial weights, sample order and random numbers", "", 0,
                    MITRA_FIELD(runtime.seed)));
}

// The pipeline (the manager's plan wins over these).
void AddPipeline(std::vector<TrainerOption>& t) {
  t.push_back(Named("schedule", "--schedule", "gpipe | 1f1b | varuna | zb-h1 | interleaved | zb-v",
                    MITRA_FIELD(runtime.schedule), &planner::ParseScheduleKind,
                    &planner::ScheduleName));
  t.push_back(Switch("recompute", "--recompute",
                     "recompute activations in the backward; varuna always does", "",
                     MITRA_FIELD(runtime.recompute)));
  t.push_back(Named("partition", "--partition",
                    "uniform | params (balances the parameters) | counts such as 1,4,4,3 | "
                    "counts per pipeline such as 1,3/3,1",
                    MITRA_FIELD(runtime.partition), &cutpoint::ParsePartitionMethod,
                    &cutpoint::PartitionMethodName));
  t.push_back(Named("backend", "--backend", "gloo | nccl (nccl: a CUDA build, scripts/gpu-build)",
                    MITRA_FIELD(runtime.backend), &ParseBackend, &BackendName));
  t.push_back(Named("precision", "--precision", "fp32 | bf16 | fp16 (fp16: a GPU only)",
                    MITRA_FIELD(runtime.precision), &contract::ParsePrecision,
                    &contract::PrecisionName));
  t.push_back(Named("device", "--device", "cpu | cuda (the local rank's GPU; a CUDA build)",
                    MITRA_FIELD(runtime.device), &contract::ParseDeviceKind,
                    &contract::DeviceKindName));
  t.push_back(Switch("share_gpus", "--share-gpus",
                     "cuda: local rank r computes on GPU r mod GPUs, so that ranks may share a "
                     "GPU (tests, small models)",
                     "", MITRA_FIELD(runtime.share_gpus)));
  t.push_back(LossScale());
  t.push_back(Whole("bucket_elements", "--bucket-elements",
                    "data-parallel gradient bucket size in elements", "", 1,
                    MITRA_FIELD(runtime.bucket_elements)));
  t.push_back(Whole("zero", "--zero",
                    "1: each replica keeps the optimizer state of its share of the stage only "
                    "(ZeRO-1)",
                    "", 0, MITRA_FIELD(runtime.zero), 1));
}

// The update.
void AddUpdate(std::vector<TrainerOption>& t) {
  t.push_back(OptimizerName());
  t.push_back(Number("lr", "--lr", "peak learning rate", "", 0, MITRA_FIELD(runtime.lr.base)));
  t.push_back(Whole("warmup", "--warmup", "linear warm-up steps", "", 0,
                    MITRA_FIELD(runtime.lr.warmup_steps)));
  t.push_back(Whole("cosine_steps", "--cosine-steps", "end of the cosine decay",
                    "constant after the warm-up", 0, MITRA_FIELD(runtime.lr.total_steps)));
  t.push_back(Number("min_lr_ratio", "--min-lr-ratio", "where the cosine ends, as a fraction of lr",
                     "", 0, MITRA_FIELD(runtime.lr.min_ratio)));
  t.push_back(Number("clip", "--clip", "global gradient-norm clip, 0 or less disables", "", kNoMin,
                     MITRA_FIELD(runtime.clip_norm)));
  t.push_back(Number("weight_decay", "--weight-decay", "decoupled for adamw, L2 for sgd and adam",
                     "", 0, MITRA_FIELD(runtime.optimizer.weight_decay)));
  t.push_back(Betas());
  t.push_back(Number("eps", "--eps", "adam and adamw", "", 0, MITRA_FIELD(runtime.optimizer.eps)));
  t.push_back(Number("momentum", "--momentum", "sgd", "", 0,
                     MITRA_FIELD(runtime.optimizer.momentum)));
  t.push_back(Number("dampening", "--dampening", "sgd", "", 0,
                     MITRA_FIELD(runtime.optimizer.dampening)));
  t.push_back(Switch("nesterov", "--nesterov", "sgd with Nesterov momentum", "",
                     MITRA_FIELD(runtime.optimizer.nesterov)));
}

// The data.
void AddData(std::vector<TrainerOption>& t) {
  t.push_back(Named("sampler", "--sampler", "shuffled | sequential", MITRA_FIELD(runtime.sampler),
                    &ParseSamplerKind, &SamplerKindName));
  t.back().instead = "or a factory (size, seed) -> object with index_at(position)";
}

// The program's own code.
void AddProgramCode(std::vector<TrainerOption>& t) {
  t.push_back(Object("on_step", "fn(mitra.StepInfo) after every step the job trains, on the "
                                "training thread"));
}

// Evaluation (a program that has an evaluation set gives its own flags for these).
void AddEvaluation(std::vector<TrainerOption>& t) {
  t.push_back(Object("eval_dataset", "evaluated every eval_every steps and after the last"));
  t.push_back(Whole("eval_every", "", "evaluate every N steps", "only after the last step", 0,
                    MITRA_FIELD(eval.every)));
  t.push_back(Whole("eval_max_samples", "", "evaluate the first N samples only", "all", 0,
                    MITRA_FIELD(eval.max_samples)));
  t.push_back(Whole("eval_chunk_size", "", "micro-batch of the evaluation", "the training one", 0,
                    MITRA_FIELD(eval.chunk_size)));
  t.push_back(Object("metrics", "{name: (outputs, batch) -> sum over the micro-batch}"));
}

// Checkpoints and output (mitra run's checkpoint settings win over these).
void AddOutput(std::vector<TrainerOption>& t) {
  t.push_back(Text("checkpoint_dir", "--checkpoint-dir",
                   "where checkpoints go when run alone (mitra run sets its own)",
                   MITRA_FIELD(checkpoint.dir)));
  t.push_back(Whole("checkpoint_every", "--checkpoint-every", "save every N steps",
                    "only at the end and on stop", 0, MITRA_FIELD(checkpoint.every)));
  t.push_back(Whole("keep_checkpoints", "--keep-checkpoints", "complete checkpoints kept, 0: all",
                    "", 0, MITRA_FIELD(checkpoint.keep)));
  t.push_back(Switch("async_checkpoints", "--async-checkpoints",
                     "write checkpoints in the background", "", MITRA_FIELD(checkpoint.async)));
  t.push_back(Whole("log_every", "--log-every", "a log line every N steps, 0: none", "", 0,
                    MITRA_FIELD(log_every)));
  t.push_back(Text("dump_params", "--dump-params",
                   "after training, write each stage's parameters and buffers to this folder",
                   MITRA_FIELD(dump_params)));
  t.push_back(Whole("dump_replica", "--dump-replica", "which replica dumps them, -1: every one",
                    "", -1, MITRA_FIELD(dump_replica)));
  t.push_back(Text("trace", "--trace",
                   "a chrome trace of one step (the third), per rank (FILE.rank-R.json)",
                   MITRA_FIELD(runtime.trace_path)));
}

std::vector<TrainerOption> MakeTable() {
  std::vector<TrainerOption> t;
  AddBatch(t);
  AddPipeline(t);
  AddUpdate(t);
  AddData(t);
  AddProgramCode(t);
  AddEvaluation(t);
  AddOutput(t);
  return t;
}

#undef MITRA_FIELD

std::string Between(const TrainerOption& o) {
  return "from " + std::to_string(static_cast<int64_t>(o.min)) + " to " + std::to_string(o.max);
}

// InvalidArgument unless `value` is of the option's type and in its range.
Status CheckValue(const TrainerOption& o, const OptionValue& value) {
  const std::string text = "'" + OptionValueText(value) + "'";
  switch (o.type) {
    case OptionType::kWhole: {
      const int64_t* n = std::get_if<int64_t>(&value);
      if (n && *n >= o.min && *n <= o.max) return Status::Ok();
      if (o.max < std::numeric_limits<int64_t>::max()) {
        return Status::InvalidArgument(text + " is not a whole number " + Between(o));
      }
      return Status::InvalidArgument(text + " is not a whole number >= " +
                                     std::to_string(static_cast<int64_t>(o.min)));
    }
    case OptionType::kNumber: {
      const double* x = std::get_if<double>(&value);
      if (x && !std::isnan(*x) && *x >= o.min) return Status::Ok();
      return Status::InvalidArgument(text + " is not a number" +
                                     (o.min > kNoMin ? " >= " + NumberText(o.min) : ""));
    }
    case OptionType::kSwitch:
      if (std::holds_alternative<bool>(value)) return Status::Ok();
      return Status::InvalidArgument(text + " is not true or false");
    case OptionType::kText:
    case OptionType::kName: {
      const std::string* s = std::get_if<std::string>(&value);
      if (s && !s->empty()) return Status::Ok();
      return Status::InvalidArgument("needs a value that is not empty");
    }
    case OptionType::kPair:
      if (std::holds_alternative<std::pair<double, double>>(value)) return Status::Ok();
      return Status::InvalidArgument(text + " is not two numbers");
    case OptionType::kObject:
      break;
  }
  return Status::InvalidArgument("takes an object of the program's, not a value");
}

}  // namespace

const std::vector<TrainerOption>& TrainerOptionTable() {
  static const std::vector<TrainerOption> table = MakeTable();
  return table;
}

const TrainerOption* FindTrainerOption(std::string_view name) {
  for (const TrainerOption& o : TrainerOptionTable()) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

Status SetTrainerOption(const TrainerOption& option, const OptionValue& value,
                        TrainerOptions& options) {
  if (Status s = CheckValue(option, value); !s.ok()) return s;
  return option.set(value, options);
}

std::string OptionValueText(const OptionValue& value) {
  struct Text {
    std::string operator()(int64_t n) const { return std::to_string(n); }
    std::string operator()(double x) const { return NumberText(x); }
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(const std::string& s) const { return s; }
    std::string operator()(const std::pair<double, double>& p) const {
      return NumberText(p.first) + "," + NumberText(p.second);
    }
  };
  return std::visit(Text{}, value);
}

}  // namespace mitra::worker
