// PySegment: a segment whose layers are a Python torch.nn.Module.
//
// The runtime knows a stage's parameters and buffers through LibTorch's module tree, by
// qualified name. A PySegment mirrors the Python module's tree as C++ modules holding the very
// same tensors (one storage, one autograd identity), so the names match Python's state_dict()
// keys ("layer1.0.bn1.running_mean"), the optimizer updates what Python's forward reads, and
// checkpoints hold what Python sees. A parameter or submodule reachable twice is mirrored once,
// as Python's named_parameters() lists it; non-persistent buffers are left out, as in
// state_dict(). The contract this needs from the module: it keeps its parameters and buffers
// as they were when built (it changes them in place — optimizers, running statistics — but
// does not assign new tensors to them); Check() says when one did.
//
// Forward and train()/eval() take the GIL (py_call.h); the segment may be destroyed on any
// thread.
#pragma once

#include <string>
#include <vector>

#include "mitra/cutpoint/model.h"
#include "python/src/py_call.h"

namespace mitra::python {

class PySegment : public cutpoint::Segment {
 public:
  // `module`: the torch.nn.Module; `call`: a Python callable dict -> dict that runs it (the
  // package's adapter for bare tensors). Needs the GIL.
  PySegment(std::string name, py::object module, py::object call);

  cutpoint::Activations Forward(const cutpoint::Activations& inputs) override;
  void train(bool on = true) override;

  const std::string& segment_name() const { return name_; }
  const PyRef& module() const { return module_; }

  // OK while every mirrored tensor is still the one the Python module holds under its name;
  // else a RuntimeError naming the first that was replaced. Needs the GIL.
  void Check() const;

 private:
  std::string name_;
  // What names this segment in errors, made once: Forward runs every micro-batch.
  std::string forward_what_, returned_what_;
  PyRef module_;
  PyRef call_;
  // What Check() compares: qualified name -> the tensor mirrored.
  std::vector<std::pair<std::string, torch::Tensor>> mirrored_;
  bool checked_ = false;  // Check() runs after the first training forward
};

}  // namespace mitra::python
