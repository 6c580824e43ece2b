#include "python/src/trainer_options.h"

#include <memory>
#include <set>

#include "python/src/py_activations.h"
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

// An option given as a built-in's name or as a Python factory: the name into `*name`, the
// factory, converted by `convert`, into `*factory`.
template <typename Factory, typename Convert>
void ReadNameOrFactory(Options& o, const std::string& key, std::string* name, Factory* factory,
                       Convert convert) {
  if (!o.Has(key)) return;
  py::object value = o[key];
  if (py::isinstance<py::str>(value)) {
    *name = py::cast<std::string>(value);
  } else {
    *factory = convert(value);
  }
}

void ReadRuntime(Options& o, worker::RuntimeOptions& rt) {
  o.Read("schedule", &rt.schedule);
  o.Read("recompute", &rt.recompute);
  o.Read("partition", &rt.partition);
  o.Read("backend", &rt.backend);
  o.Read("precision", &rt.precision);
  o.Read("device", &rt.device);
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
  o.Read("trace", &rt.trace_path);
  ReadNameOrFactory(o, "sampler", &rt.sampler, &rt.custom_sampler, SamplerFactoryFromPython);
  worker::OptimizerOptions& opt = rt.optimizer;
  ReadNameOrFactory(o, "optimizer", &opt.name, &opt.custom, OptimizerFactoryFromPython);
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

}  // namespace

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
  o.CheckAllRead();
  return out;
}

}  // namespace mitra::python
