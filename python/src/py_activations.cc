#include "python/src/py_activations.h"

#include <torch/python.h>

namespace mitra::python {

void RaisePython(PyObject* type, const std::string& message) {
  PyErr_SetString(type, message.c_str());
  throw py::error_already_set();
}

py::dict ToPython(const cutpoint::Activations& activations) {
  py::dict out;
  for (const auto& [name, tensor] : activations) out[py::str(name)] = py::cast(tensor);
  return out;
}

torch::Tensor TensorFromPython(const py::handle& object, const std::string& what) {
  if (!THPVariable_Check(object.ptr())) {
    RaisePython(PyExc_TypeError, what + " a " + std::string(py::str(py::type::of(object).attr("__name__"))) +
                                     " where a torch.Tensor was expected");
  }
  return THPVariable_Unpack(object.ptr());
}

namespace {

// What torch.as_tensor takes without guessing: Python numbers and NumPy arrays.
bool ConvertibleToTensor(const py::handle& value) {
  return py::isinstance<py::int_>(value) || py::isinstance<py::float_>(value) ||
         py::isinstance<py::bool_>(value) || py::hasattr(value, "__array_interface__");
}

}  // namespace

cutpoint::Activations SampleFromPython(const py::handle& object, const std::string& what) {
  if (!py::isinstance<py::dict>(object)) return FromPython(object, what);
  py::dict converted;
  for (const auto& [key, value] : py::reinterpret_borrow<py::dict>(object)) {
    converted[key] = ConvertibleToTensor(value)
                         ? py::module_::import("torch").attr("as_tensor")(value)
                         : py::reinterpret_borrow<py::object>(value);
  }
  return FromPython(converted, what);
}

cutpoint::Activations FromPython(const py::handle& object, const std::string& what) {
  if (!py::isinstance<py::dict>(object)) {
    RaisePython(PyExc_TypeError,
                what + " a " + std::string(py::str(py::type::of(object).attr("__name__"))) +
                    " where a dict of tensors was expected ({\"name\": tensor, ...})");
  }
  cutpoint::Activations out;
  for (const auto& [key, value] : py::reinterpret_borrow<py::dict>(object)) {
    if (!py::isinstance<py::str>(key)) {
      RaisePython(PyExc_TypeError, what + " a dict with the key " + std::string(py::repr(key)) +
                                       ": the names of tensors must be strings");
    }
    const std::string name = py::cast<std::string>(key);
    out.emplace(name, TensorFromPython(value, what + " (under '" + name + "')"));
  }
  return out;
}

}  // namespace mitra::python
