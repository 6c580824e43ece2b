#include "python/src/trainer_options.h"

#include <functional>
#include <memory>
#include <set>

#include "python/src/py_activations.h"
#include "python/src/py_call.h"
#include "python/src/py_data.h"
#include "python/src/py_optimizer.h"
#include "python/src/py_spec.h"

namespace mitra::python {
namespace {

// Reads each option once and says which it did not read: a key this file does not know is a
// name the package and the runtime disagree on.
class Options {
 public:
  explicit Options(const py::dict& options) : options_(options) {}
  // Raises KeyError for a key nothing read.
  void CheckAllRead() const {
    for (const auto& item : options_) {
      const std::string key = py::cast<std::string>(item.first);
      if (!read_.count(key)) RaisePython(PyExc_KeyError, "mitra: unknown Trainer option '" + key + "'");
    }
  }
  py::object operator[](const std::string& key) {
    read_.insert(key);
    return options_[py::str(key)];
  }
  template <typename T>
  void Read(const std::string& key, T* into) {
    if (options_.contains(key)) *into = py::cast<T>((*this)[key]);
  }
  bool Has(const std::string& key) { return options_.contains(key) && !(*this)[key].is_none(); }

 private:
  const py::dict& options_;
  std::set<std::string> read_;
};

// A named setting, parsed by `parse` (ParseScheduleKind, ...): a bad name raises ValueError
// with the names it could have been.
template <typename T>
T Parsed(const std::string& key, const std::string& name, Result<T> (*parse)(const std::string&)) {
  Result<T> parsed = parse(name);
  if (!parsed.ok()) {
    RaisePython(PyExc_ValueError, "mitra.Trainer: " + key + ": " + parsed.status().message());
  }
  return *parsed;
}

template <typename T>
void ReadNamed(Options& o, const std::string& key, T* into,
               Result<T> (*parse)(const std::string&)) {
  if (o.Has(key)) *into = Parsed(key, py::cast<std::string>(o[key]), parse);
}

// An option given as a built-in's name or as a Python factory: the name to `set_name`, the
// factory, converted by `convert`, into `*factory`.
template <typename Factory, typename Convert>
void ReadNameOrFactory(Options& o, const std::string& key,
                       const std::function<void(const std::string&)>& set_name, Factory* factory,
                       Convert convert) {
  if (!o.Has(key)) return;
  py::object value = o[key];
  if (py::isinstance<py::str>(value)) {
    set_name(py::cast<std::string>(value));
  } else {
    *factory = convert(value);
  }
}

void ReadRuntime(Options& o, worker::RuntimeOptions& rt) {
  ReadNamed(o, "schedule", &rt.schedule, &planner::ParseScheduleKind);
  o.Read("recompute", &rt.recompute);
  ReadNamed(o, "partition", &rt.partition, &cutpoint::ParsePartitionMethod);
  ReadNamed(o, "backend", &rt.backend, &worker::ParseBackend);
  ReadNamed(o, "precision", &rt.precision, &contract::ParsePrecision);
  ReadNamed(o, "device", &rt.device, &contract::ParseDeviceKind);
  o.Read("share_gpus", &rt.share_gpus);
  if (o.Has("loss_scale")) {
    rt.loss_scaler.enabled = true;
    rt.loss_scaler.initial_scale = py::cast<double>(o["loss_scale"]);
  }
  o.Read("seed", &rt.seed);
  o.Read("batch_size", &rt.global_batch);
  o.Read("chunk_size", &rt.chunk_size);
  o.Read("clip", &rt.clip_norm);
  o.Read("lr", &rt.lr.base);
  o.Read("warmup", &rt.lr.warmup_steps);
  o.Read("cosine_steps", &rt.lr.total_steps);
  o.Read("min_lr_ratio", &rt.lr.min_ratio);
  o.Read("bucket_elements", &rt.bucket_elements);
  o.Read("zero", &rt.zero);
  o.Read("trace", &rt.trace_path);
  ReadNameOrFactory(
      o, "sampler",
      [&rt](const std::string& name) {
        rt.sampler = Parsed("sampler", name, &worker::ParseSamplerKind);
      },
      &rt.custom_sampler, SamplerFactoryFromPython);
  worker::OptimizerOptions& opt = rt.optimizer;
  ReadNameOrFactory(  // MakeOptimizer checks the name
      o, "optimizer", [&opt](const std::string& name) { opt.name = name; }, &opt.custom,
      OptimizerFactoryFromPython);
  o.Read("weight_decay", &opt.weight_decay);
  if (o.Has("betas")) {
    const auto betas = py::cast<std::pair<double, double>>(o["betas"]);
    opt.beta1 = betas.first;
    opt.beta2 = betas.second;
  }
  o.Read("eps", &opt.eps);
  o.Read("momentum", &opt.momentum);
  o.Read("dampening", &opt.dampening);
  o.Read("nesterov", &opt.nesterov);
}

void ReadEval(Options& o, worker::EvalOptions& eval) {
  if (o.Has("eval_dataset")) eval.dataset = std::make_shared<PyDataset>(o["eval_dataset"]);
  o.Read("eval_every", &eval.every);
  o.Read("eval_max_samples", &eval.max_samples);
  o.Read("eval_chunk_size", &eval.chunk_size);
  if (o.Has("metrics")) eval.metrics = MetricsFromPython(o["metrics"]);
}

// on_step: the Python callable, called with a mitra.StepInfo under the GIL.
std::function<void(const worker::StepInfo&)> StepHookFromPython(const py::object& fn) {
  PyRef hook(fn);
  return [hook](const worker::StepInfo& info) {
    CallPython("the step hook (on_step)", [&] { hook.get()(info); });
  };
}

}  // namespace

py::dict TrainerDefaults() {
  const worker::TrainerOptions out;
  const worker::RuntimeOptions& rt = out.runtime;
  py::dict d;
  d["batch_size"] = rt.global_batch;
  d["chunk_size"] = rt.chunk_size;
  d["max_steps"] = out.max_steps;
  d["seed"] = rt.seed;
  d["schedule"] = planner::ScheduleName(rt.schedule);
  d["recompute"] = rt.recompute;
  d["partition"] = cutpoint::PartitionMethodName(rt.partition);
  d["backend"] = worker::BackendName(rt.backend);
  d["precision"] = contract::PrecisionName(rt.precision);
  d["device"] = contract::DeviceKindName(rt.device);
  d["share_gpus"] = rt.share_gpus;
  d["loss_scale"] = rt.loss_scaler.initial_scale;  // when fp16 turns scaling on
  d["bucket_elements"] = rt.bucket_elements;
  d["zero"] = rt.zero;
  d["optimizer"] = rt.optimizer.name;
  d["lr"] = rt.lr.base;
  d["warmup"] = rt.lr.warmup_steps;
  d["cosine_steps"] = rt.lr.total_steps;
  d["min_lr_ratio"] = rt.lr.min_ratio;
  d["clip"] = rt.clip_norm;
  d["weight_decay"] = rt.optimizer.weight_decay;
  d["betas"] = py::make_tuple(rt.optimizer.beta1, rt.optimizer.beta2);
  d["eps"] = rt.optimizer.eps;
  d["momentum"] = rt.optimizer.momentum;
  d["dampening"] = rt.optimizer.dampening;
  d["nesterov"] = rt.optimizer.nesterov;
  d["sampler"] = worker::SamplerKindName(rt.sampler);
  d["eval_every"] = out.eval.every;
  d["eval_max_samples"] = out.eval.max_samples;
  d["eval_chunk_size"] = out.eval.chunk_size;
  d["checkpoint_every"] = out.checkpoint.every;
  d["keep_checkpoints"] = out.checkpoint.keep;
  d["async_checkpoints"] = out.checkpoint.async;
  d["log_every"] = out.log_every;
  d["dump_replica"] = out.dump_replica;
  return d;
}

worker::TrainerOptions TrainerOptionsFromPython(const py::dict& options) {
  worker::TrainerOptions out;
  Options o(options);
  ReadRuntime(o, out.runtime);
  ReadEval(o, out.eval);
  o.Read("max_steps", &out.max_steps);
  o.Read("log_every", &out.log_every);
  o.Read("dump_params", &out.dump_params);
  o.Read("dump_replica", &out.dump_replica);
  o.Read("checkpoint_dir", &out.checkpoint.dir);
  o.Read("checkpoint_every", &out.checkpoint.every);
  o.Read("keep_checkpoints", &out.checkpoint.keep);
  o.Read("async_checkpoints", &out.checkpoint.async);
  if (o.Has("on_step")) out.on_step = StepHookFromPython(o["on_step"]);
  o.CheckAllRead();
  return out;
}

}  // namespace mitra::python
