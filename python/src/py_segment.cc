#include "python/src/py_segment.h"

#include <unordered_set>

#include <torch/python.h>

#include "python/src/py_activations.h"

namespace mitra::python {
namespace {

// What has been mirrored already: a module or tensor reachable twice is mirrored once.
struct Seen {
  std::unordered_set<PyObject*> modules;
  std::unordered_set<const void*> tensors;  // TensorImpl*
};

// The mirror of a Python BatchNorm (torch.nn.modules.batchnorm._BatchNorm keeping running
// statistics): the runtime combines its statistics across replicas as it does LibTorch's.
class MirroredBatchNorm : public torch::nn::Module, public cutpoint::RunningStatistics {
 public:
  MirroredBatchNorm(std::string kind, c10::optional<double> momentum)
      : torch::nn::Module(kind), kind_(std::move(kind)), momentum_(momentum) {}
  c10::optional<double> momentum() const override { return momentum_; }
  std::string kind() const override { return kind_; }

 private:
  std::string kind_;
  c10::optional<double> momentum_;
};

// The C++ module that mirrors `py_module` (its contents are added by Mirror).
std::shared_ptr<torch::nn::Module> MirrorOf(const py::handle& py_module) {
  const std::string kind = py::cast<std::string>(py::type::of(py_module).attr("__name__"));
  const py::object batchnorm =
      py::module_::import("torch.nn.modules.batchnorm").attr("_BatchNorm");
  if (py::isinstance(py_module, batchnorm) &&
      py::cast<bool>(py_module.attr("track_running_stats"))) {
    const py::object momentum = py_module.attr("momentum");
    return std::make_shared<MirroredBatchNorm>(
        kind, momentum.is_none() ? c10::nullopt : c10::optional<double>(py::cast<double>(momentum)));
  }
  return std::make_shared<torch::nn::Module>(kind);
}

// Mirrors `py_module`'s own parameters and persistent buffers into `into`, then its children
// as child modules, depth first: LibTorch's named_parameters() then lists the same names, in
// the same order, as Python's.
void Mirror(const py::handle& py_module, const std::string& prefix, torch::nn::Module& into,
            Seen& seen, std::vector<std::pair<std::string, torch::Tensor>>& mirrored) {
  for (const auto& item : py_module.attr("named_parameters")(py::arg("recurse") = false)) {
    const auto pair = py::reinterpret_borrow<py::tuple>(item);
    torch::Tensor t = TensorFromPython(pair[1], "parameter '" + prefix + py::cast<std::string>(pair[0]) + "' is");
    if (!seen.tensors.insert(t.unsafeGetTensorImpl()).second) continue;
    const std::string name = py::cast<std::string>(pair[0]);
    into.register_parameter(name, t, t.requires_grad());
    mirrored.emplace_back(prefix + name, t);
  }
  const py::object non_persistent = py::getattr(py_module, "_non_persistent_buffers_set", py::set());
  for (const auto& item : py_module.attr("named_buffers")(py::arg("recurse") = false)) {
    const auto pair = py::reinterpret_borrow<py::tuple>(item);
    if (non_persistent.contains(pair[0])) continue;
    torch::Tensor t = TensorFromPython(pair[1], "buffer '" + prefix + py::cast<std::string>(pair[0]) + "' is");
    if (!seen.tensors.insert(t.unsafeGetTensorImpl()).second) continue;
    const std::string name = py::cast<std::string>(pair[0]);
    into.register_buffer(name, t);
    mirrored.emplace_back(prefix + name, t);
  }
  for (const auto& item : py_module.attr("named_children")()) {
    const auto pair = py::reinterpret_borrow<py::tuple>(item);
    if (!seen.modules.insert(pair[1].ptr()).second) continue;
    const std::string name = py::cast<std::string>(pair[0]);
    std::shared_ptr<torch::nn::Module> child = MirrorOf(pair[1]);
    Mirror(pair[1], prefix + name + ".", *child, seen, mirrored);
    into.register_module(name, child);
  }
}

}  // namespace

PySegment::PySegment(std::string name, py::object module, py::object call)
    : name_(std::move(name)),
      forward_what_("the forward of segment '" + name_ + "'"),
      returned_what_("segment '" + name_ + "' returned") {
  Seen seen;
  seen.modules.insert(module.ptr());
  Mirror(module, "", *this, seen, mirrored_);
  torch::nn::Module::train(py::cast<bool>(module.attr("training")));
  module_ = PyRef(std::move(module));
  call_ = PyRef(std::move(call));
}

cutpoint::Activations PySegment::Forward(const cutpoint::Activations& inputs) {
  return CallPython(forward_what_, [&] {
    py::object out = call_.get()(ToPython(inputs));
    if (!checked_ && is_training()) {
      Check();
      checked_ = true;
    }
    return FromPython(out, returned_what_);
  });
}

void PySegment::train(bool on) {
  CallPython("train()/eval() of segment '" + name_ + "'",
             [&] { module_.get().attr("train")(on); });
  torch::nn::Module::train(on);
}

void PySegment::Check() const {
  const py::dict state = module_.get().attr("state_dict")(py::arg("keep_vars") = true);
  for (const auto& [name, tensor] : mirrored_) {
    const py::str key(name);
    if (!state.contains(key)) continue;  // reachable under another name only
    const torch::Tensor current = TensorFromPython(state[key], "state '" + name + "' is");
    if (current.unsafeGetTensorImpl() != tensor.unsafeGetTensorImpl()) {
      RaisePython(PyExc_RuntimeError,
                  "segment '" + name_ + "' assigned a new tensor to '" + name +
                      "' after it was built; mitra trains the tensors a module holds when its "
                      "factory returns it: update them in place (tensor.copy_(), "
                      "tensor.data.copy_()) instead of assigning new ones");
    }
  }
}

}  // namespace mitra::python
