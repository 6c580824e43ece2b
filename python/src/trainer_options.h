// mitra.Trainer's keyword arguments (python/mitra/trainer.py gathers them in a dict) as the
// worker's TrainerOptions, and the defaults of those it leaves out. The names are the Python
// API's, documented in docs/python.md; the package checks their types before they come here.
#pragma once

#include <pybind11/pybind11.h>

#include "mitra/worker/trainer.h"

namespace mitra::python {

namespace py = pybind11;

// Needs the GIL. An unknown key is a bug of the package: it raises KeyError. A named setting
// (schedule, partition, backend, precision, device, sampler) that is none of the names raises
// ValueError listing them.
worker::TrainerOptions TrainerOptionsFromPython(const py::dict& options);

// {keyword: default} for the keywords that have one, from a default TrainerOptions (the
// worker's own defaults, mitra/worker/runtime.h and mitra/worker/trainer.h), in the keywords' types
// and the named settings' names: what mitra.trainer.OPTIONS shows.
py::dict TrainerDefaults();

}  // namespace mitra::python
