// mitra.Trainer's keyword arguments (python/mitra/trainer.py gathers them in a dict, with
// their defaults) as the worker's TrainerOptions. The names are the Python API's, documented
// in docs/python.md; the package checks their types before they come here.
#pragma once

#include <pybind11/pybind11.h>

#include "mitra/worker/trainer.h"

namespace mitra::python {

namespace py = pybind11;

// Needs the GIL. An unknown key is a bug of the package: it raises KeyError.
worker::TrainerOptions TrainerOptionsFromPython(const py::dict& options);

}  // namespace mitra::python
