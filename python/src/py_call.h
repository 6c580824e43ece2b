// Calling Python from mitra's C++ runtime: the GIL, object lifetimes and errors in one place.
//
// The runtime trains with the GIL released (a backward run while holding it is refused by
// torch's autograd engine, and mitra's threads — Gloo's, the checkpoint writer, the heartbeat —
// must never wait on a thread that holds it). Every call into Python goes through CallPython,
// which takes the GIL for the call alone. Python objects the runtime keeps are held as PyRef,
// which may be copied and destroyed on any thread.
//
// Errors: a Python exception in a callback gets a note naming what raised it ("the forward of
// segment 'block3'"). Inside Trainer.run() (ExitOnPythonError) the worker then prints the
// traceback and ends with exit code 1 at once: unwinding through a pipeline whose peers wait
// in collectives would hang them until the timeout, while a process that is gone is noticed
// by every peer within milliseconds. Elsewhere (InferenceModel) the exception propagates to
// the Python caller as usual.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include <pybind11/pybind11.h>

namespace mitra::python {

namespace py = pybind11;

// A reference to a Python object that is safe to copy and destroy on any thread, with or
// without the GIL: copies share one py::object, released under the GIL by the last owner.
class PyRef {
 public:
  PyRef() = default;
  // Needs the GIL.
  explicit PyRef(py::object object);

  // The object; use it only while holding the GIL.
  const py::object& get() const { return *object_; }
  bool is_none() const { return !object_ || object_->is_none(); }

 private:
  std::shared_ptr<py::object> object_;
};

// While one exists, a Python exception in a callback ends the process (see above). Made by
// the thread that runs Trainer.run(), with the GIL held. Not nestable across threads.
class ExitOnPythonError {
 public:
  ExitOnPythonError();
  ~ExitOnPythonError();
  ExitOnPythonError(const ExitOnPythonError&) = delete;
  ExitOnPythonError& operator=(const ExitOnPythonError&) = delete;
};

namespace detail {
// Adds "mitra: raised in <what>" to the exception and, under ExitOnPythonError, prints the
// traceback and exits with code 1. Returns when the exception is to propagate. Needs the GIL.
void OnPythonError(py::error_already_set& error, const std::string& what);
}  // namespace detail

// Runs `body` (which may use Python) with the GIL held, on the calling thread. `what` names
// the callable for an error: "the loss", "the forward of segment 'block3'".
template <typename Body>
auto CallPython(const std::string& what, Body&& body) -> decltype(body()) {
  py::gil_scoped_acquire gil;
  try {
    return body();
  } catch (py::error_already_set& error) {
    detail::OnPythonError(error, what);
    throw;
  }
}

}  // namespace mitra::python
