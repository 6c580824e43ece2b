#include "python/src/py_spec.h"

#include <memory>

#include <torch/python.h>

#include "python/src/py_activations.h"
#include "python/src/py_call.h"
#include "python/src/py_segment.h"

namespace mitra::python {

cutpoint::LossFn LossFromPython(py::object fn, std::string what) {
  PyRef ref(std::move(fn));
  return [ref, what](const cutpoint::Activations& outputs, const cutpoint::Activations& batch) {
    return CallPython(what, [&] {
      const py::object result = ref.get()(ToPython(outputs), ToPython(batch));
      torch::Tensor value = TensorFromPython(result, what + " returned");
      if (value.dim() != 0) {
        RaisePython(PyExc_ValueError,
                    what + " returned a tensor of shape " + c10::str(value.sizes()) +
                        ": it must return one number, the sum over the micro-batch's samples "
                        "of each sample's value (a mean-reduced function can be wrapped in "
                        "mitra.sum_over_samples)");
      }
      return value;
    });
  };
}

std::vector<std::pair<std::string, cutpoint::MetricFn>> MetricsFromPython(const py::handle& metrics) {
  std::vector<std::pair<std::string, cutpoint::MetricFn>> out;
  if (metrics.is_none()) return out;
  const py::object items = py::isinstance<py::dict>(metrics) ? metrics.attr("items")()
                                                              : py::reinterpret_borrow<py::object>(metrics);
  for (const auto& item : items) {
    const auto pair = py::reinterpret_borrow<py::tuple>(item);
    const std::string name = py::cast<std::string>(pair[0]);
    out.emplace_back(name, LossFromPython(py::reinterpret_borrow<py::object>(pair[1]),
                                          "metric '" + name + "'"));
  }
  return out;
}

cutpoint::ModelSpec SpecFromPython(const py::handle& spec) {
  cutpoint::ModelSpec out;
  for (const auto& item : spec.attr("_segments")) {
    const auto pair = py::reinterpret_borrow<py::tuple>(item);
    const std::string name = py::cast<std::string>(pair[0]);
    PyRef make(py::reinterpret_borrow<py::object>(pair[1]));
    out.AddSegment(name, [name, make]() -> std::shared_ptr<cutpoint::Segment> {
      return CallPython("the factory of segment '" + name + "'", [&] {
        const py::tuple built = make.get()();
        return std::make_shared<PySegment>(name, built[0], built[1]);
      });
    });
  }
  for (const auto& item : spec.attr("_ties")) {
    const auto pair = py::reinterpret_borrow<py::tuple>(item);
    out.TieWeights(py::cast<std::string>(pair[0]), py::cast<std::vector<std::string>>(pair[1]));
  }
  const py::object loss = spec.attr("loss");
  if (!loss.is_none()) out.loss = LossFromPython(loss, "the loss");
  out.tokens_per_sample = py::cast<int64_t>(spec.attr("tokens_per_sample"));
  out.micro_batch_independent = py::cast<bool>(spec.attr("micro_batch_independent"));
  const std::string keys = py::cast<std::string>(spec.attr("state_dict_keys"));
  if (keys != "qualified" && keys != "module") {
    RaisePython(PyExc_ValueError, "spec.state_dict_keys is '" + keys +
                                      "': it is 'qualified' or 'module' (set by from_module)");
  }
  out.state_dict_keys = keys == "module" ? cutpoint::ModelSpec::StateDictKeys::kModule
                                         : cutpoint::ModelSpec::StateDictKeys::kQualified;
  return out;
}

}  // namespace mitra::python
