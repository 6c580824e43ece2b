// _mitra: the extension under the Python package `mitra` (python/mitra/). The package's
// Python layer builds the objects; this module hands them to the C++ runtime: Trainer.run()
// and InferenceModel run mitra's C++ code with the GIL released, taking it only for the
// Python callbacks (py_call.h).
#include <pybind11/stl.h>
#include <torch/python.h>
#include <torch/version.h>

#include "mitra/cutpoint/linear.h"
#include "mitra/worker/inference.h"
#include "mitra/worker/placement.h"
#include "mitra/worker/trainer.h"
#include "python/src/py_activations.h"
#include "python/src/py_call.h"
#include "python/src/py_data.h"
#include "python/src/py_optimizer.h"
#include "python/src/py_segment.h"
#include "python/src/py_spec.h"
#include "python/src/trainer_options.h"

namespace mitra::python {
namespace {

// What this extension was built against, for the package's check at import (mitra/_build.py):
// torch's C++ ABI and pybind11's internals must be the ones of the torch that is imported.
py::dict BuildInfo() {
  py::dict info;
  info["torch_version"] = std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR);
  info["cxx11_abi"] = static_cast<bool>(_GLIBCXX_USE_CXX11_ABI);
  info["pybind11_compiler_type"] = PYBIND11_COMPILER_TYPE;
  info["pybind11_stdlib"] = PYBIND11_STDLIB;
  info["pybind11_build_abi"] = PYBIND11_BUILD_ABI;
  info["pybind11_internals_version"] = PYBIND11_INTERNALS_VERSION;
  return info;
}

// Result<T> -> T, or the Python exception its code calls for.
template <typename T>
T Unwrap(Result<T> result) {
  if (result.ok()) return std::move(*result);
  const Status& s = result.status();
  PyObject* type = s.code() == Status::Code::kNotFound        ? PyExc_FileNotFoundError
                   : s.code() == Status::Code::kInvalidArgument ? PyExc_ValueError
                                                                : PyExc_OSError;
  RaisePython(type, s.message());
}

// A Trainer, with the Python objects it was given kept alive with it.
class PyTrainer {
 public:
  PyTrainer(const py::object& spec, const py::object& dataset, const py::dict& options)
      : trainer_(SpecFromPython(spec),
                 dataset.is_none() ? nullptr : std::make_shared<PyDataset>(dataset),
                 TrainerOptionsFromPython(options)),
        has_dataset_(!dataset.is_none()) {}

  int Run() {
    if (!has_dataset_ && !worker::DescribeRequested()) {
      RaisePython(PyExc_ValueError, "mitra.Trainer has no dataset: give it one to train on");
    }
    ExitOnPythonError exit_on_error;
    py::gil_scoped_release release;
    return trainer_.Run();
  }

 private:
  worker::Trainer trainer_;
  bool has_dataset_;
};

class PyInferenceModel {
 public:
  PyInferenceModel(const py::object& spec, const std::string& path)
      : model_(Load(SpecFromPython(spec), path)) {}

  py::dict Forward(const py::object& batch) {
    cutpoint::Activations in = FromPython(batch, "InferenceModel.forward() was given");
    cutpoint::Activations out;
    {
      py::gil_scoped_release release;
      out = model_->Forward(in);
    }
    return ToPython(out);
  }

  py::dict Evaluate(const py::object& dataset, const py::object& metrics, int64_t max_samples,
                    int64_t batch_size) {
    PyDataset data(dataset);
    const auto fns = MetricsFromPython(metrics);
    worker::EvalResult r;
    {
      py::gil_scoped_release release;
      r = model_->Evaluate(data, fns, max_samples, batch_size);
    }
    py::dict out;
    out["samples"] = r.samples;
    out["loss"] = r.loss;
    for (const auto& [name, value] : r.metrics) out[py::str(name)] = value;
    return out;
  }

  // name -> the segment's torch.nn.Module, holding the checkpoint's weights.
  py::dict Segments() const {
    py::dict out;
    for (const auto& segment : model_->stage().segments()) {
      const auto& py_segment = dynamic_cast<const PySegment&>(*segment);
      out[py::str(py_segment.segment_name())] = py_segment.module().get();
    }
    return out;
  }

  int64_t step() const { return model_->step(); }

 private:
  static std::unique_ptr<worker::InferenceModel> Load(const cutpoint::ModelSpec& spec,
                                                      const std::string& path) {
    auto load = [&] {
      py::gil_scoped_release release;
      return worker::InferenceModel::Load(spec, path);
    };
    return Unwrap(load());
  }

  std::unique_ptr<worker::InferenceModel> model_;
};

}  // namespace
}  // namespace mitra::python

PYBIND11_MODULE(_mitra, m) {
  using namespace mitra;          // NOLINT
  using namespace mitra::python;  // NOLINT
  m.doc() = "mitra's C++ runtime; use the package `mitra`, not this module";
  m.def("build_info", &BuildInfo);
  m.def("describe_requested", &worker::DescribeRequested,
        "True when the manager started this process to describe the model, not to train it");
  m.def("started_by_manager", [] {
    const Result<worker::Placement> placement = worker::Placement::FromEnvironment();
    return placement.ok() && !placement->standalone;
  }, "True when `mitra run` started this process (its place in the job is in the environment)");
  m.def("splitting", &cutpoint::SplitBackward::active,
        "True inside a training forward of a zero-bubble schedule (mitra.Linear splits there)");
  m.def("linear",
        [](const torch::Tensor& input, const torch::Tensor& weight,
           const std::optional<torch::Tensor>& bias) {
          return cutpoint::linear(input, weight, bias.value_or(torch::Tensor()));
        },
        py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(),
        "input @ weight.T + bias, whose weight gradients a zero-bubble schedule's B leaves to W");
  m.def("trainer_options", &TrainerOptionRows,
        "mitra.Trainer's options, one dict per row of the C++ table (worker/option_table.h)");
  py::class_<worker::StepInfo>(m, "StepInfo",
                               "What Trainer(on_step=fn) tells fn after each step the job trains")
      .def_readonly("step", &worker::StepInfo::step, "the step just trained, 1-based")
      .def_readonly("loss", &worker::StepInfo::loss, "its mean loss over the global batch")
      .def_readonly("grad_norm", &worker::StepInfo::grad_norm, "before clipping")
      .def_readonly("lr", &worker::StepInfo::lr)
      .def_readonly("seconds", &worker::StepInfo::seconds, "the step's time on this rank")
      .def_readonly("rank", &worker::StepInfo::rank)
      .def_readonly("stage", &worker::StepInfo::stage)
      .def_readonly("replica", &worker::StepInfo::replica)
      .def_readonly("stages", &worker::StepInfo::stages)
      .def_readonly("replicas", &worker::StepInfo::replicas)
      .def_readonly("generation", &worker::StepInfo::generation)
      .def("__repr__", [](const worker::StepInfo& s) {
        return "StepInfo(step=" + std::to_string(s.step) + ", loss=" + std::to_string(s.loss) +
               ", rank=" + std::to_string(s.rank) + ", shape=" + std::to_string(s.stages) + "x" +
               std::to_string(s.replicas) + ")";
      });
  py::class_<PyTrainer>(m, "Trainer")
      .def(py::init<const py::object&, const py::object&, const py::dict&>(), py::arg("spec"),
           py::arg("dataset"), py::arg("options"))
      .def("run", &PyTrainer::Run);
  py::class_<PyInferenceModel>(m, "InferenceModel")
      .def(py::init<const py::object&, const std::string&>(), py::arg("spec"), py::arg("path"))
      .def("forward", &PyInferenceModel::Forward, py::arg("batch"))
      .def("evaluate", &PyInferenceModel::Evaluate, py::arg("dataset"), py::arg("metrics"),
           py::arg("max_samples"), py::arg("batch_size"))
      .def("segments", &PyInferenceModel::Segments)
      .def_property_readonly("step", &PyInferenceModel::step);
}
