// Activations (mitra/cutpoint/activations.h) to and from Python dicts of tensors. The tensors are
// the same objects on both sides: nothing is copied. Both need the GIL.
#pragma once

#include <string>

#include <pybind11/pybind11.h>

#include "mitra/cutpoint/activations.h"

namespace mitra::python {

namespace py = pybind11;

py::dict ToPython(const cutpoint::Activations& activations);

// A dict of str -> torch.Tensor. Anything else raises a Python TypeError (thrown as
// py::error_already_set) whose message names `what` ("segment 'block3' returned") and says
// what was expected.
cutpoint::Activations FromPython(const py::handle& object, const std::string& what);

// A dataset's sample: like FromPython, but numbers and NumPy arrays become tensors as
// torch.as_tensor makes them (a label given as an int: a 0-d int64 tensor), as PyTorch's own
// collation accepts them.
cutpoint::Activations SampleFromPython(const py::handle& object, const std::string& what);

// A torch.Tensor, or the same TypeError.
torch::Tensor TensorFromPython(const py::handle& object, const std::string& what);

// Sets a Python exception of `type` and throws it as py::error_already_set, so that it takes
// the path of every other Python error (CallPython's note, exit or propagation).
[[noreturn]] void RaisePython(PyObject* type, const std::string& message);

}  // namespace mitra::python
