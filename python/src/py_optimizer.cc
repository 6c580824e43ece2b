#include "python/src/py_optimizer.h"

#include <torch/python.h>

#include "python/src/py_activations.h"
#include "python/src/py_call.h"

namespace mitra::python {
namespace {

class PyOptimizer : public worker::Optimizer {
 public:
  explicit PyOptimizer(PyRef optimizer) : optimizer_(std::move(optimizer)) {}

  std::string Name() const override {
    return CallPython("the optimizer's name()",
                      [&] { return py::cast<std::string>(optimizer_.get().attr("name")()); });
  }
  std::string Describe() const override {
    return CallPython("the optimizer's describe()",
                      [&] { return py::cast<std::string>(optimizer_.get().attr("describe")()); });
  }
  void Step(double lr) override {
    CallPython("the optimizer's step()", [&] { optimizer_.get().attr("step")(lr); });
  }
  std::vector<std::pair<std::string, torch::Tensor>> State(const torch::Tensor& param) const override {
    return CallPython("the optimizer's state()", [&] {
      std::vector<std::pair<std::string, torch::Tensor>> out;
      const py::object state = optimizer_.get().attr("state")(py::cast(param));
      for (const auto& [name, tensor] : FromPython(state, "the optimizer's state() returned")) {
        if (name.find('/') != std::string::npos) {
          RaisePython(PyExc_ValueError, "the optimizer's state() named a tensor '" + name +
                                            "': names of optimizer state hold no '/'");
        }
        out.emplace_back(name, tensor);
      }
      return out;
    });
  }
  Status SetState(const torch::Tensor& param,
                  const std::map<std::string, torch::Tensor>& state) override {
    return CallPython("the optimizer's set_state()", [&]() -> Status {
      py::dict tensors;
      for (const auto& [name, tensor] : state) tensors[py::str(name)] = py::cast(tensor);
      try {
        optimizer_.get().attr("set_state")(py::cast(param), tensors);
      } catch (py::error_already_set& e) {
        // A state that does not fit is the caller's to report (a checkpoint of another model);
        // anything else is a bug in the optimizer and takes the usual way.
        if (!e.matches(PyExc_ValueError)) throw;
        return Status::InvalidArgument(py::cast<std::string>(py::str(e.value())));
      }
      return Status::Ok();
    });
  }
  int StateTensorsPerParameter() const override {
    return CallPython("the optimizer's state_tensors_per_parameter()", [&] {
      if (!py::hasattr(optimizer_.get(), "state_tensors_per_parameter")) return 0;
      return py::cast<int>(optimizer_.get().attr("state_tensors_per_parameter")());
    });
  }

 private:
  PyRef optimizer_;
};

}  // namespace

worker::OptimizerFactory OptimizerFactoryFromPython(py::object factory) {
  PyRef ref(std::move(factory));
  return [ref](const std::vector<torch::Tensor>& parameters) -> std::unique_ptr<worker::Optimizer> {
    return CallPython("the optimizer factory", [&] {
      py::list params;
      for (const auto& p : parameters) params.append(py::cast(p));
      py::object optimizer = ref.get()(params);
      for (const char* method : {"name", "describe", "step", "state", "set_state"}) {
        if (!py::hasattr(optimizer, method)) {
          RaisePython(PyExc_TypeError,
                      "the optimizer factory returned a " +
                          py::cast<std::string>(py::type::of(optimizer).attr("__name__")) +
                          " without " + method + "(): derive it from mitra.Optimizer, or wrap "
                          "a torch.optim class in mitra.TorchOptimizer");
        }
      }
      return std::make_unique<PyOptimizer>(PyRef(std::move(optimizer)));
    });
  };
}

}  // namespace mitra::python
