#include "python/src/py_call.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace mitra::python {
namespace {

std::atomic<int> g_exit_on_error{0};

// Flushes what Python and C have buffered for stdout and stderr: the traceback and the last
// records must reach the manager before the process ends. Needs the GIL.
void FlushEverything() {
  try {
    py::module_ sys = py::module_::import("sys");
    for (const char* stream : {"stdout", "stderr"}) {
      py::object s = sys.attr(stream);
      if (!s.is_none()) s.attr("flush")();
    }
  } catch (py::error_already_set&) {
    PyErr_Clear();
  }
  std::fflush(stdout);
  std::fflush(stderr);
}

}  // namespace

PyRef::PyRef(py::object object)
    : object_(new py::object(std::move(object)), [](py::object* o) {
        // Py_IsInitialized: a reference dropped while the interpreter shuts down is leaked, as
        // CPython itself does with objects that outlive it.
        if (Py_IsInitialized()) {
          py::gil_scoped_acquire gil;
          delete o;
        } else {
          o->release();
          delete o;
        }
      }) {}

ExitOnPythonError::ExitOnPythonError() { ++g_exit_on_error; }
ExitOnPythonError::~ExitOnPythonError() { --g_exit_on_error; }

namespace detail {

void OnPythonError(py::error_already_set& error, const std::string& what) {
  const py::object value = error.value();
  if (py::hasattr(value, "add_note")) {  // Python 3.11: the traceback prints the note
    try {
      value.attr("add_note")("mitra: raised in " + what);
    } catch (py::error_already_set&) {
      PyErr_Clear();
    }
  }
  if (g_exit_on_error.load() == 0) return;
  // print_exception, not PyErr_Print: the latter would act on a SystemExit by finalising the
  // interpreter from inside a training step.
  try {
    // An error raised from C++ (RaisePython) has no traceback: a null object, not None.
    const py::object trace = error.trace() ? error.trace() : py::none();
    py::module_::import("traceback").attr("print_exception")(error.type(), value, trace);
  } catch (py::error_already_set&) {
    PyErr_Clear();
    std::fprintf(stderr, "%s\n", error.what());
  }
  py::print("mitra: a Python exception in", what, "ends this worker (exit code 1)",
            py::arg("file") = py::module_::import("sys").attr("stderr"));
  FlushEverything();
  std::_Exit(1);
}

}  // namespace detail
}  // namespace mitra::python
