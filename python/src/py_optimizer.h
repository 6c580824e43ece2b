// A Python optimizer (mitra.Optimizer, python/mitra/optim.py) as the runtime's
// worker::Optimizer: the same interface, its state checkpointed by segment and parameter name
// like the built-in ones. Each call takes the GIL (py_call.h).
#pragma once

#include <pybind11/pybind11.h>

#include "mitra/worker/optimizer.h"

namespace mitra::python {

namespace py = pybind11;

// `factory`: a Python callable (list of parameters) -> an object with name(), describe(),
// step(lr), state(param) -> {name: tensor}, set_state(param, {name: tensor}) and optionally
// state_tensors_per_parameter(). Needs the GIL.
worker::OptimizerFactory OptimizerFactoryFromPython(py::object factory);

}  // namespace mitra::python
