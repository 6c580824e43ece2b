// The Python package's model description (mitra.ModelSpec, python/mitra/spec.py) as the
// runtime's cutpoint::ModelSpec: factories, the loss and metrics become C++ callables that take
// the GIL for the call (py_call.h).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <pybind11/pybind11.h>

#include "mitra/cutpoint/model.h"

namespace mitra::python {

namespace py = pybind11;

// Reads a mitra.ModelSpec: its segments (name, make() -> (module, call)), tied weights, loss,
// tokens_per_sample and micro_batch_independent. Needs the GIL.
cutpoint::ModelSpec SpecFromPython(const py::handle& spec);

// A loss or metric callable (outputs, batch) -> 0-d tensor, as the runtime calls it. `what`
// names it in errors ("the loss", "metric 'accuracy'"). Needs the GIL.
cutpoint::LossFn LossFromPython(py::object fn, std::string what);

// {name: callable} or [(name, callable)] -> the runtime's metrics. Needs the GIL.
std::vector<std::pair<std::string, cutpoint::MetricFn>> MetricsFromPython(const py::handle& metrics);

}  // namespace mitra::python
