// mitra.Trainer's keyword arguments (python/mitra/trainer.py gathers them in a dict) as the
// worker's TrainerOptions, read through the one table of options (worker/option_table.h), and
// that table as Python sees it.
#pragma once

#include <pybind11/pybind11.h>

#include "mitra/worker/trainer.h"

namespace mitra::python {

namespace py = pybind11;

// Needs the GIL. Each key is a row of worker/option_table.h: an unknown one is a bug of the
// package and raises KeyError; None leaves the default. A value of the wrong type raises
// TypeError, one out of range or a name that is none of the setting's names ValueError, saying
// what it should be.
worker::TrainerOptions TrainerOptionsFromPython(const py::dict& options);

// The option table, one dict per row in its order: name, type ("whole", "number", "switch",
// "text", "name", "pair" or "object"), help, note, instead, and default (the value a default
// TrainerOptions holds, in the keyword's Python type; None when it has none). What
// mitra.trainer.DEFAULTS, OPTIONS and the generated signature are made from.
py::list TrainerOptionRows();

}  // namespace mitra::python
